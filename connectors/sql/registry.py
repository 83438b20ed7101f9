"""Which query owns a sink id, recorded in the target database itself.

Transaction ids and markers are namespaced by sink id; a second job that
writes to the same database with the same sink id (a copied job with an
explicit ``sinkId``) would settle, or skip, the first job's work. The first
query to check a sink id registers its checkpoint location; a query with
another checkpoint location is refused before it writes anything.
"""

from __future__ import annotations

import sqlalchemy as sa

from eoskit.twophase.contract import SinkContext, SinkError
from eoskit.twophase.identity import restored_from

REGISTRY_TABLE = "eoskit_sinks"


def _table(metadata: sa.MetaData, schema: str | None) -> sa.Table:
    return sa.Table(
        REGISTRY_TABLE, metadata,
        sa.Column("sink_id", sa.String(64), primary_key=True),
        sa.Column("checkpoint_location", sa.String(1024), nullable=False),
        sa.Column("registered_at", sa.DateTime(timezone=True), server_default=sa.func.now()),
        schema=schema,
    )


def _same(a: str, b: str | None) -> bool:
    return b is not None and a.rstrip("/") == b.rstrip("/")


def claim_sink_id(engine: sa.Engine, schema: str | None, context: SinkContext, where: str) -> None:
    """Register the sink id for this query's checkpoint, or refuse. A
    checkpoint restored from a savepoint of the registered one takes the
    registration over (the job moved); a second restore of the same
    savepoint then finds the first one registered, and is refused."""
    metadata = sa.MetaData()
    table = _table(metadata, schema)
    metadata.create_all(engine, checkfirst=True)
    moved_from = restored_from(context.checkpoint_location)
    with engine.begin() as conn:
        owner = conn.execute(
            sa.select(table.c.checkpoint_location).where(table.c.sink_id == context.sink_id)
        ).scalar_one_or_none()
        if owner is None:
            try:
                conn.execute(table.insert().values(
                    sink_id=context.sink_id, checkpoint_location=context.checkpoint_location))
            except sa.exc.IntegrityError:
                owner = conn.execute(
                    sa.select(table.c.checkpoint_location).where(table.c.sink_id == context.sink_id)
                ).scalar_one()
        elif moved_from is not None and _same(owner, moved_from):
            conn.execute(table.update().where(table.c.sink_id == context.sink_id).values(
                checkpoint_location=context.checkpoint_location))
            owner = context.checkpoint_location
    if owner is not None and not _same(owner, context.checkpoint_location):
        raise SinkError(
            f"sink id {context.sink_id!r} in {where} belongs to the query with checkpoint "
            f"{owner}; this query's checkpoint is {context.checkpoint_location}"
            + (f" (restored from a savepoint of {moved_from}, whose sink has moved on since: a "
               "second restore of one savepoint)" if moved_from else "")
            + ". Two jobs must not share a sink id: set another 'sinkId' (or, if the "
            f"checkpoint moved, update {REGISTRY_TABLE} after settling its in-doubt transactions)"
        )
