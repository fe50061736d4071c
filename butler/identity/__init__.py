"""This agent's identity: its Ed25519 key (``key_file``), the receipts it signs for every
terminal task (``receipts``), and the peers' keys it has pinned (``pins``)."""
