"""The A2A protocol as Butler speaks it: ``model`` (value types and errors), ``codec``
(one module per wire), ``server`` (the bindings), ``client`` (the outbound client).
"""
