"""Persistent editing sessions: an artist's conversation that spans many ComfyUI prompts.

Layout of a store directory (default: <ComfyUI user dir>/respec/sessions, standalone
<RESPEC_HOME>/sessions, or RESPEC_SESSIONS_DIR):

    sessions.sqlite3            SQLite in WAL mode: sessions and turns (text, plan, meta, digests)
    images/ab/<sha256>.png      every image once, named by its content hash (respec.images.content_hash)

Guarantees (tests/test_history_store.py checks each one):
- An image file is complete (temp file + fsync + rename) before the transaction that refers to
  it commits, so a committed turn never points at a half-written PNG. A process killed in the
  middle of an append leaves at most an unreferenced PNG behind (harmless; `gc` removes it).
- Every change runs in one `BEGIN IMMEDIATE` transaction that also assigns the turn index, so
  concurrent appends from several processes serialise: nothing is lost, nothing interleaves.
- Each change bumps the session's version (never decreasing); together with a lineage id (new on
  creation and on rewind) it is the cache key for ComfyUI (IS_CHANGED) and for this process's history cache.
- A new store file appears complete: it is built under a temporary name (schema, WAL mode) and
  hard-linked into place, so several processes opening a store that does not exist yet all
  succeed, and no process ever sees a half-made store. Its identity (tables and schema version)
  is read in one statement; busy states are retried within the store's timeout.
- A file that is not a ReSpec store (random bytes, another program's database, a newer schema,
  an empty 0-byte file) raises StoreError saying so; the file is never modified.
- Loading a session decodes no image: turns carry LazyStoredImage values that decode their PNG
  (and verify its hash) the first time their pixels are read. A cold load reads only the latest
  turn's row; the earlier rows are read together when one of them is first asked for
  (StoredTurns), so opening a long session costs what opening a short one does.

The parts, one per seam:

    sessions.py    SessionStore (create, load, append, append_once, rewind, branch, delete_session,
                   gc), session ids, the process-wide stores (open_store, workflow_store_root)
    turns.py       what a turn's fields become in the store; StoredTurns, the lazily read turns
    database.py    the SQLite file: schema, creation aside, identity, migrations, `transaction`
    files.py       ImageFiles and LazyStoredImage; `save_png`, the pack's atomic content-addressed PNG writer

Unused image files (after a rewind, a deleted session or a killed append) go with
`python -m respec gc`, POST /respec/sessions/gc, or the panel's "Clean up unused images" button.
"""
from .sessions import SessionStore, open_store, validate_session_id, workflow_store_root

__all__ = ["SessionStore", "open_store", "validate_session_id", "workflow_store_root"]
