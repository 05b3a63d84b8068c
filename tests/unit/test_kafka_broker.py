"""The local broker script's pure parts."""


def test_cluster_ids_never_look_like_options() -> None:
    from frazil_dev.kafka_broker import new_cluster_id

    ids = [new_cluster_id() for _ in range(2000)]  # about 30 would start with '-' unguarded
    assert all(len(i) == 22 and not i.startswith("-") for i in ids)
