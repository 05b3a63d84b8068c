"""The transaction log: a checksummed, segmented journal of the commit protocol, with
checkpoints of the whole recoverable state (see docs/transaction-log.md)."""

from frazil.txlog.journal import Journal, JournalPolicy
from frazil.txlog.recovery import Recovered, open_journal, recover
from frazil.txlog.state import TxState

__all__ = ["Journal", "JournalPolicy", "Recovered", "TxState", "open_journal", "recover"]
