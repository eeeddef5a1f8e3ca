# One invoice per customer and month, whichever worker gets there first. No lock.
import datetime

import psycopg

DSN = "host=127.0.0.1 dbname=billing user=billing"
SCHEMA = """CREATE TABLE IF NOT EXISTS invoices (
    customer_id BIGINT NOT NULL, month DATE NOT NULL, total_cents BIGINT NOT NULL,
    PRIMARY KEY (customer_id, month))"""


def issue_invoice(customer_id: int, month: datetime.date, total_cents: int) -> bool:
    """True if this call issued the invoice, False if another worker already had."""
    with psycopg.connect(DSN) as db, db.transaction():
        inserted = db.execute(
            "INSERT INTO invoices VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            (customer_id, month, total_cents),
        ).rowcount  # 0: the row exists; the key decides, however many workers race
        # ... the invoice's other writes (ledger lines, an outbox row) go here, same transaction
    return inserted == 1
