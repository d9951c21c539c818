"""Asks a DNS server one question with dnspython and prints the reply as JSON.

Usage: dns_ask.py SERVER_IP PORT NAME TYPE udp|tcp
Prints {"rcode": "NOERROR", "answers": ["203.0.113.7"], "tc": false, "id_matches": true}.
"""
import json
import sys

import dns.flags
import dns.message
import dns.query
import dns.rcode
import dns.rdatatype

server, port, name, rtype, transport = sys.argv[1:6]
query = dns.message.make_query(name, rtype)
if transport == "udp":
    reply = dns.query.udp(query, server, port=int(port), timeout=5, ignore_trailing=False)
else:
    reply = dns.query.tcp(query, server, port=int(port), timeout=5)
answers = []
for rrset in reply.answer:
    for rd in rrset:
        answers.append(rd.to_text())
print(json.dumps({
    "rcode": dns.rcode.to_text(reply.rcode()),
    "answers": answers,
    "ttls": [rrset.ttl for rrset in reply.answer],
    "tc": bool(reply.flags & dns.flags.TC),
    "id_matches": reply.id == query.id,
    "question": [q.to_text() for q in reply.question],
}))
