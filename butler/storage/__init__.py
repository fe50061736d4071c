"""One async SQLite layer for every database of a Butler (tasks, audit, memory, workspace,
push configs, the registry): files 0600 in a 0700 folder, WAL, one worker thread per
database that owns its connection, group commit, and no SQLite call on the event loop
but one: ``BatchWriter``'s loop mode, which the task store's commits use."""

from butler.storage._batch_writer import BatchWriter, Item, Row
from butler.storage._checkpointer import Checkpointer, CheckpointPolicy, catch_up, checkpoint
from butler.storage._database import CannotOpen, Database, DatabaseClosed
from butler.storage._files import (
    FILE_MODE,
    FOLDER_MODE,
    private_file,
    private_folder,
    replace_private,
    write_private,
)
from butler.storage._schema import schema_version

__all__ = [
    "FILE_MODE",
    "FOLDER_MODE",
    "BatchWriter",
    "CannotOpen",
    "CheckpointPolicy",
    "Checkpointer",
    "Database",
    "DatabaseClosed",
    "Item",
    "Row",
    "catch_up",
    "checkpoint",
    "private_file",
    "private_folder",
    "replace_private",
    "schema_version",
    "write_private",
]
