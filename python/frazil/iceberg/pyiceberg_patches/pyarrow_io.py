"""pyiceberg's private Arrow-write helpers that ``iceberg/writes.py`` calls as they are.

Not a patch: nothing of pyiceberg is changed, and the write path stays ``writes.py``'s. It is
named here so that this package holds all of frazil's use of private pyiceberg names, under
the one version gate (``install_all``, which ``catalog.load`` calls before any table is opened).
A grep for a private pyiceberg import anywhere else in frazil finds none
(tests/unit/test_pyiceberg_patches.py).

- ``dataframe_to_data_files``: pyiceberg's own writer for an unpartitioned table (bin-packed into
  target-sized files, through its writer pool), kept for the small flushes ``writes.py`` does not
  cut into slices;
- ``field_from_arrow_table``: a partition source column of an Arrow table by its name or nested
  path, as pyiceberg's partitioned write reads it.

``tests/integration/test_writes.py`` compares ``writes.py``'s partitioned files with those of
``dataframe_to_data_files``.

Retired by: public names for the two (pyiceberg exposes ``write_file`` and
``bin_pack_arrow_table`` already); no upstream issue yet.
"""

from __future__ import annotations

from pyiceberg.io.pyarrow import _dataframe_to_data_files, _get_field_from_arrow_table

dataframe_to_data_files = _dataframe_to_data_files
field_from_arrow_table = _get_field_from_arrow_table
