"""The ``extraction`` workload of ``repeat_workloads.py`` (``prompts/repeat.py`` builds it):
support tickets of one fictional product, Tallybook, each to be turned into one record under
one JSON schema. Held out like the rest of ``prompts/repeat.py``: nothing was tuned on them.
The last 8 tickets are the ones answered after the index was saved.
"""

from __future__ import annotations

TICKET_SCHEMA = {
    "type": "object",
    "properties": {
        "customer": {"type": "string"},
        "product": {"enum": ["web app", "mobile app", "billing", "api", "desktop sync"]},
        "severity": {"enum": ["low", "medium", "high", "critical"]},
        "category": {"enum": ["bug", "outage", "billing", "account", "how-to", "feature request"]},
        "summary": {"type": "string"},
        "wants_refund": {"type": "boolean"},
        "order_id": {"type": ["string", "null"]},
    },
    "required": ["customer", "product", "severity", "category", "summary", "wants_refund", "order_id"],
    "additionalProperties": False,
}

TICKET_SYSTEM = (
    "You read support tickets for Tallybook, a bookkeeping service with a web app, a mobile app, "
    "a billing portal, a public API and a desktop sync client. Turn each ticket into one JSON record: "
    "customer (the person or company writing), product, severity (critical: data loss or nobody can "
    "work; high: a main feature is broken; medium: a workaround exists; low: cosmetic or a question), "
    "category, summary (one short sentence), wants_refund, and order_id (null when the ticket names none)."
)

TICKETS = [
    "Hi, this is Marta Kowalczyk from Kowalczyk Bakery. Since this morning the mobile app crashes as soon "
    "as I open the invoices tab. I reinstalled it twice. I can still use the website, so it's not urgent.",
    "Our whole accounting team at Fenwick & Daughters cannot log in to the web app: it says 'service "
    "unavailable' on every page. We have a VAT deadline tonight. Please fix this now!",
    "I was charged twice for my annual plan (order TB-20931). Please refund the second charge. - Olu Adeyemi",
    "Hello, how do I export last year's ledger to CSV from the desktop sync client? I can't find the "
    "option anywhere. Thanks, Priya Raman",
    "The API returns 500 for every POST /v2/entries since your release yesterday. Our nightly import at "
    "Greenleaf Logistics failed and 3,000 entries are missing. Dev lead: Tomasz Nowak.",
    "It would be great if the mobile app had a dark mode. My eyes hurt at night. Cheers, Sam Okafor",
    "The desktop sync client deleted two months of receipts from my laptop after an update, and they are "
    "gone from the cloud too. This is a disaster. Jean-Luc Perrin, Perrin Menuiserie.",
    "Hi, the font on the billing portal looks blurry in Firefox. Not a big deal, just letting you know. Ana Lima",
    "Please cancel my subscription and refund this month, order TB-31877. I stopped using Tallybook after "
    "my shop closed. Regards, Hiroshi Tanaka",
    "Our API key stopped working after we rotated it, every call now gets 401 even with the new key. We "
    "can still enter data by hand in the web app. - Nadia Haddad, Haddad Imports",
    "I changed my email address and now I can't reset my password because the link goes to the old one. "
    "Can you update my account? Erik Lindqvist",
    "When I filter transactions by date in the web app, the totals at the bottom don't change. The rows "
    "are filtered correctly though. Grace O'Brien, O'Brien Florists.",
    "The billing portal shows my invoice in dollars but I am billed in euros (order TB-40412). Which one is "
    "right? Matteo Ricci",
    "Push notifications on the mobile app arrive three times for every new payment. Annoying but harmless. "
    "Lena Fischer",
    "Since Monday the desktop sync client uses 100% CPU and never finishes syncing, so my books on the "
    "laptop are a week behind. I can work in the browser meanwhile. Kwame Mensah, Mensah Electric.",
    "Could you add an API endpoint to list attachments of an entry? We'd like to archive them "
    "automatically. Thanks, Isabel Moreno at Moreno Consulting",
    "Everything is down for us: web app, mobile app and the API time out. Twelve people at Baltic Freight "
    "can't work. Contact: Aivars Ozols.",
    "I upgraded to the Pro plan but the billing portal still shows the Basic features, order TB-51230. "
    "Either give me the features or my money back. Chloe Dubois",
    "How do I add a second user to my account so my bookkeeper can see the reports? Yusuf Demir",
    "The receipt scanner in the mobile app reads every amount as 0.00 since the last update, so I have to "
    "type them in myself. Bea Santos, Santos Catering.",
    "The CSV import on the web app skips every row that has an accent in the description, e.g. 'Café'. "
    "We lose about a tenth of our rows each time. Henrik Madsen, Madsen Bikes",
    "I got an invoice for a plan I never ordered (order TB-60018). Please refund it and tell me how this "
    "happened. Fatima Zahra",
    "The API documentation page for webhooks has a broken link to the examples. Small thing. Dev at "
    "Northwind Games, Leo Park",
    "Two-factor codes from the mobile app are always rejected, so I am locked out of my account entirely. Rosa Jimenez",
    # the last 8: answered after the index was saved (the warm pass and the in-process run alike)
    "After I moved my books to a new laptop, the desktop sync client shows every entry twice. The web app "
    "shows them once. Quinn Harper, Harper Studio.",
    "Hello, I'd like a yearly summary PDF in the billing portal for my tax advisor. Is that planned? Dmitri Volkov",
    "Payments we record through the API appear in the web app with yesterday's date, which breaks our "
    "month-end close. Sophie Laurent, Laurent Vins.",
    "My card was charged but the billing portal says my payment failed and locked the account (order "
    "TB-70325). I need access today for payroll. Ahmed Karimi",
    "The mobile app logs me out every few minutes. I can log in again, it's just tiresome. Nora Berg",
    "The web app's report page has been blank for all of us at Castillo Construction since 9am, and our "
    "auditors arrive tomorrow. Miguel Castillo.",
    "How can I change the currency of my company file from pounds to euros? Aoife Byrne",
    "The desktop sync client refuses to start on Windows 11 after your update: it closes right after the "
    "splash screen. Our office uses the web app for now. Pieter de Vries, De Vries Tuin.",
]
