"""Append-only, hash-chained audit trail (see docs/audit.md)."""

from butler.audit.log import AuditError as AuditError
from butler.audit.log import AuditLog as AuditLog
from butler.audit.log import AuditRecord as AuditRecord
from butler.audit.log import VerifyResult as VerifyResult
