"""The documents of the structured-output benchmark's held-out prompts (``prompts/structured.py``
builds the prompts from them): four to extract records from, two to classify, and two lists of
tools with a user's request for the tool-call prompts.

Held out like ``prompts/structured.py``: written for that benchmark, and NEVER used to tune
anything. Knows only the texts; the tasks, the schemas and the prompt's wording are in
``prompts/structured.py``.
"""

from __future__ import annotations

# --------------------------------------------------------------------------------------
# Extraction
# --------------------------------------------------------------------------------------

INVOICE = """\
HARBOUR LANE PRINTWORKS LTD
Unit 7, Harbour Lane Industrial Estate, Falmouth TR11 2SE
VAT reg. GB 448 2193 06

INVOICE No. HLP-20931                         Date of issue: 14 March 2025
Bill to: Oakmoor Community Theatre, 22 Bellevue Road, Truro TR1 3JX
Customer ref: OCT/SPRING-PROG

Qty   Description                                   Unit price     Amount
500   A5 programme, 16pp, full colour, saddle-stitched   1.18      590.00
40    A2 poster, 170gsm silk                              3.25      130.00
2     Pull-up banner 850x2000mm with stand               64.50      129.00
1     Artwork amendments (1.5 h)                         42.00       42.00

                                                     Subtotal      891.00
                                                     VAT 20%       178.20
                                                     TOTAL GBP    1069.20
Payment due within 30 days (by 13 April 2025). Bank: Kernow Savings, sort code 60-91-44,
account 31882057. Please quote the invoice number with your payment."""

INCIDENT = """\
Post-incident review: checkout latency, 2025-02-06

Summary. Between 09:12 and 10:47 UTC the payments-api service returned HTTP 503 for
about 18% of requests to POST /v2/checkout and POST /v2/refunds. GET /v2/orders was
slow (p99 4.1 s) but did not fail. Customers saw "payment could not be processed" and
roughly 2,300 orders were abandoned.

Timeline. 09:05 a config change raised the connection pool of the ledger client from 50
to 400. 09:12 the ledger database hit its max_connections limit and began refusing new
connections. 09:31 on-call (Priya Raman) paged the database team. 10:20 the change was
identified. 10:38 the change was rolled back. 10:47 error rates returned to baseline.

Root cause. The larger pool let each of the 12 payments-api pods open up to 400
connections, exceeding the database's limit of 2,000.

Follow-ups: add a pre-deploy check of pool size x replica count against max_connections
(owner: Dmitri Volkov); alert on ledger connection refusals (owner: Priya Raman)."""

JOB_AD = """\
Senior Data Engineer (m/f/d) – Lindqvist Logistics AB, Gothenburg

We move 40,000 pallets a day through six Nordic warehouses and we want our data to keep
up. You will own the pipelines that feed our routing and demand-forecasting models.

What you will do: build and run batch and streaming pipelines (Kafka, Spark), model our
warehouse data in dbt, and mentor two junior engineers.

What we look for: at least 5 years of data engineering, strong Python and SQL,
experience with Kafka or a similar event log, and some Terraform. Swedish is a plus but
not required; our working language is English.

Hybrid: three days a week at the Gothenburg office (Lindholmen), two from home.
Salary: SEK 62,000–71,000 per month, plus pension and a yearly bonus.
Apply by 30 April 2025 at careers.lindqvist-logistics.se, reference DE-2025-14."""

MINUTES = """\
Minutes – Riverside Allotment Society committee, Tuesday 4 March 2025, 7 pm, Scout hut

Present: Helen Okafor (chair), Tom Brennan (treasurer), Aisha Patel (secretary),
Graham Lowe, Marta Nowak. Apologies: Derek Shaw.

1. Water supply. The main tap by plot 14 leaks again. Graham will get two quotes for a
   new standpipe by 18 March. Budget agreed: up to £450.
2. Rents. Tom reported 61 of 64 plots paid. Aisha will send reminders to the remaining
   three plot holders this week.
3. Open day. Set for Saturday 17 May. Marta will organise the seedling stall and needs
   volunteers; Helen will contact the local paper by 1 April.
4. Shed break-in. Police reference recorded; Tom will claim on the society insurance
   (excess £100) by 11 March.

Next meeting: Tuesday 1 April 2025, 7 pm."""

# --------------------------------------------------------------------------------------
# Classification
# --------------------------------------------------------------------------------------

TICKET = """\
From: j.whitfield@brightmeadow-vets.co.uk
Subject: Still can't export invoices – third time asking!!

Hello,

Since your update on Monday our practice manager cannot export the month's invoices to
CSV. The button spins and then we get "Error 502 – upstream timed out". We tried Chrome
and Edge, two different PCs, same thing. We have to send these to our accountant by
Friday or we get a late filing penalty. I opened ticket #88213 on Tuesday and #88240 on
Wednesday and nobody has replied.

We pay for the Practice Plus plan and frankly this is not good enough. If this is not
fixed by Thursday we will have to look at other software.

Jane Whitfield
Brightmeadow Veterinary Clinic"""

REVIEWS = """\
Review 1: "Arrived a day early and the fit is perfect. The fabric is thinner than I
expected for the price, though."
Review 2: "Zip broke the second time I wore it. Returned it, refund took three weeks."
Review 3: "Lovely colour, exactly like the photos, and it washes well."
Review 4: "Sizing runs small, order one up. Customer service swapped it quickly."
Review 5: "Cheap-feeling material and the stitching on the pocket came loose."
Review 6: "Delivery was slow but the jacket itself is warm and well made." """

# --------------------------------------------------------------------------------------
# Tool calls
# --------------------------------------------------------------------------------------

TOOLS_TRAVEL = """\
Available tools:
- search_trains(origin, destination, date, depart_after, max_changes, railcard): find train
  journeys. date is YYYY-MM-DD, depart_after is HH:MM, railcard may be null.
- book_hotel(city, check_in, nights, guests, max_price_per_night, breakfast): reserve a
  room. check_in is YYYY-MM-DD.
- convert_currency(amount, from_currency, to_currency): convert money at today's rate.

User request: "I need to get from Leeds to Edinburgh on 22 May 2025, leaving no earlier
than half past eight in the morning. I have a 16-25 railcard and I'd rather not change
trains more than once." """

TOOLS_HOME = """\
Available tools:
- set_thermostat(room, temperature_c, mode, until): mode is one of heat, cool, auto, off;
  until is HH:MM or null for indefinitely.
- create_reminder(title, date, time, repeat, notes): repeat is one of none, daily,
  weekly, monthly; notes may be null.
- play_music(room, query, shuffle, volume): volume 0-100.

User request: "Remind me every week on Thursdays to put the recycling bins out – start
this Thursday, 6 March 2025, at 19:45, and add a note that the green bin goes out only
on odd weeks." """
