"""The ``sql`` workload of ``repeat_workloads.py`` (``prompts/repeat.py`` builds it): 32
questions over one SQLite schema of a city bike-sharing service, given in the system prompt.
Held out like the rest of ``prompts/repeat.py``. The last 8 are the ones answered after the
index was saved.
"""

from __future__ import annotations

SQL_SCHEMA = (
    "CREATE TABLE stations (id INTEGER PRIMARY KEY, name TEXT NOT NULL, city TEXT NOT NULL, capacity INTEGER);\n"
    """CREATE TABLE bikes (id INTEGER PRIMARY KEY, model TEXT NOT NULL, electric INTEGER NOT NULL,
  home_station_id INTEGER REFERENCES stations(id), bought_on DATE);
CREATE TABLE members (id INTEGER PRIMARY KEY, name TEXT NOT NULL, email TEXT UNIQUE, joined_on DATE,
  plan TEXT CHECK (plan IN ('monthly', 'annual', 'pay-as-you-go')));
CREATE TABLE rides (id INTEGER PRIMARY KEY, bike_id INTEGER REFERENCES bikes(id),
  member_id INTEGER REFERENCES members(id), start_station_id INTEGER REFERENCES stations(id),
  end_station_id INTEGER REFERENCES stations(id), started_at TIMESTAMP, ended_at TIMESTAMP,
  distance_km REAL, price_cents INTEGER);
CREATE TABLE repairs (id INTEGER PRIMARY KEY, bike_id INTEGER REFERENCES bikes(id), reported_at TIMESTAMP,
  fixed_at TIMESTAMP, issue TEXT, cost_cents INTEGER);"""
)

SQL_SYSTEM = (
    "You write SQLite queries for a city bike-sharing database with this schema:\n\n"
    + SQL_SCHEMA
    + "\n\nAnswer every question with one SQL query in a ```sql code block and nothing else."
)

QUESTIONS = [
    "How many stations are there in each city?",
    "List the names of members who joined in 2024, newest first.",
    "What is the average ride distance for electric bikes?",
    "Which five stations had the most rides starting there?",
    "Total revenue in euros from rides in March 2025.",
    "Find bikes that have never been repaired.",
    "Which members on the annual plan took more than 50 rides?",
    "The longest ride ever, with the member's name and its duration in minutes.",
    "How many repairs are still open (not fixed yet)?",
    "Average repair cost per bike model.",
    "Stations where more rides end than start.",
    "For each month of 2025, the number of rides.",
    "Members who have an email at example.org.",
    "The bike with the highest total distance ridden.",
    "How many rides started and ended at the same station?",
    "Cities ranked by the total capacity of their stations.",
    "Members who never took a ride.",
    "The average price of a ride per plan.",
    "Bikes bought before 2022 that are electric.",
    "The busiest hour of the day for ride starts.",
    "For each station, the number of bikes whose home it is.",
    "Repairs that took more than 7 days to fix, with the bike model.",
    "The top three members by money spent on rides.",
    "How many distinct bikes did member 42 ride?",
    # the last 8
    "Rides longer than 20 km that cost less than 2 euros.",
    "The most common repair issue.",
    "Stations in Lyon with a capacity over 30, by name.",
    "Each member's first ride date.",
    "The share of rides taken on electric bikes, as a percentage.",
    "Bikes repaired more than three times in 2025.",
    "Average number of rides per member on each plan.",
    "The station pair (start, end) used most often.",
]
