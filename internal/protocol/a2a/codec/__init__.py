"""The wire formats, one module per wire: ``butler_v2`` (Butler /v2 REST), ``a2a_v1`` (proto3
JSON of A2A 1.0), ``a2a_v03``, ``card`` (the agent card), ``swarm_envelope`` (the swarm
envelope on every binding: body, headers, A2A extension metadata), ``peer_answers``
(lenient reading of other agents' answers), ``input_schema`` (a skill's input checked
against its JSON Schema); ``exact_json`` and ``proto3`` are the JSON they share.
"""
