"""The held-out tool conversation of issue 28 item 4: a train search, its result, a second
search and a booking, with the two tools it calls. Written for
tests/test_integration_tools.py (which checks edgespec renders it as the GGUF template
does) and asked of both servers by ``benchmarks/tool_result_peer.py``; never tuned on.
``call`` builds one tool call as the openai client sends it back."""

from __future__ import annotations

import json

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "find_connections",
            "description": "Timetable search: trains from one station to another on a day, after a time",
            "parameters": {
                "type": "object",
                "properties": {
                    "from_station": {"type": "string"},
                    "to_station": {"type": "string"},
                    "day": {"type": "string", "description": "YYYY-MM-DD"},
                    "not_before": {"type": "string", "description": "HH:MM, local time"},
                    "bikes": {"type": "boolean"},
                },
                "required": ["from_station", "to_station", "day"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "reserve",
            "description": "Hold seats on one connection for 20 minutes",
            "parameters": {
                "type": "object",
                "properties": {
                    "connection": {"type": "string"},
                    "seats": {"type": "integer", "minimum": 1},
                    "class": {"enum": ["first", "second"]},
                },
                "required": ["connection", "seats"],
            },
        },
    },
]


def call(cid: str, name: str, arguments: dict) -> dict:
    # as the openai client sends a call back: arguments are the JSON text the server gave
    return {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(arguments)}}


OUTWARD = {
    "from_station": "Zürich HB",
    "to_station": "Milano Centrale",
    "day": "2027-03-06",
    "not_before": "06:00",
    "bikes": True,
}
CONVERSATION = [
    {
        "role": "user",
        "content": "Two of us with bikes, Zurich to Milan on Saturday 6 March, early. "
        "And what comes back on the Sunday evening?",
    },
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            call("call_out", "find_connections", OUTWARD),
            call(
                "call_back",
                "find_connections",
                {
                    **OUTWARD,
                    "from_station": "Milano Centrale",
                    "to_station": "Zürich HB",
                    "day": "2027-03-07",
                    "not_before": "17:00",
                },
            ),
        ],
    },
    {
        "role": "tool",
        "tool_call_id": "call_out",
        "content": json.dumps({"connections": [{"id": "EC 311", "dep": "07:33", "arr": "10:50", "bike_spaces": 4}]}),
    },
    {
        "role": "tool",
        "tool_call_id": "call_back",
        "content": json.dumps(
            {
                "connections": [
                    {"id": "EC 324", "dep": "17:10", "arr": "20:27", "bike_spaces": 0},
                    {"id": "EC 326", "dep": "19:10", "arr": "22:27", "bike_spaces": 2},
                ]
            }
        ),
    },
    {
        "role": "assistant",
        "content": "EC 311 leaves at 07:33 with 4 bike spaces. Going back, EC 326 "
        "(19:10) is the one with room for bikes. Shall I hold seats?",
    },
    {"role": "user", "content": "Yes, second class, both trains."},
    {
        "role": "assistant",
        "content": "Holding them now.",
        "tool_calls": [call("call_r1", "reserve", {"connection": "EC 311", "seats": 2, "class": "second"})],
    },
    {"role": "tool", "tool_call_id": "call_r1", "content": '{"held_until": "09:41", "ref": "Q7TX"}'},
]
