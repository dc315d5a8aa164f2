"""The coordination stores' shared documents (``read_document``/``update_document``),
the one contract of the local and the ZooKeeper store: a document never written reads
as {}, concurrent changes from several stores and threads all land (compare-and-set
with retry), and a place holding something other than a JSON object is an error that
names it."""

from __future__ import annotations

import threading

import pytest

from sparklog.coordination import LocalCoordinationStore
from sparklog.errors import CoordinationError

STORES = ["local", pytest.param("zookeeper", marks=pytest.mark.zookeeper)]


@pytest.fixture(params=STORES)
def stores(request, storage_root):
    """A factory of stores sharing one cluster (a storage root, or a ZooKeeper chroot),
    and a function that puts raw bytes where the document ``name`` lives."""
    made = []
    if request.param == "local":
        def make():
            made.append(LocalCoordinationStore(storage_root))
            return made[-1]

        def put_raw(name, data):
            made[0]._file(*name.split("/")).write(1, data)
    else:
        pytest.importorskip("kazoo", reason="kazoo is not installed (pip install "
                                            "sparklog[cluster])")
        from sparklog.coordination.zkstore import ZkCoordinationStore

        zookeeper = request.getfixturevalue("zookeeper")

        def make():
            made.append(ZkCoordinationStore(zookeeper.connect, connection_timeout_ms=20000))
            return made[-1]

        def put_raw(name, data):
            made[0].client.create(f"/sparklog/{name}", data, makepath=True)
    make()
    yield make, put_raw
    for store in made:
        store.close()


def test_a_document_never_written_reads_empty_and_an_update_starts_from_empty(stores):
    make, _ = stores
    store = make()
    assert store.read_document("security/acls") == {}
    seen = []

    def change(doc):
        seen.append(dict(doc))
        return {**doc, "a": 1}
    assert store.update_document("security/acls", change) == {"a": 1}
    assert seen == [{}]
    assert make().read_document("security/acls") == {"a": 1}  # another store sees it


def test_concurrent_updates_from_several_stores_all_land(stores):
    make, _ = stores
    writers, each = [make(), make()], 15
    errors = []

    def bump(store, who):
        try:
            for i in range(each):
                store.update_document("counters", lambda doc: {
                    **doc, "n": doc.get("n", 0) + 1, who: doc.get(who, 0) + 1})
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)
    threads = [threading.Thread(target=bump, args=(store, f"{k}-{t}"))
               for k, store in enumerate(writers) for t in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    doc = make().read_document("counters")
    assert doc["n"] == 4 * each  # no change lost to a concurrent one
    assert sorted(v for k, v in doc.items() if k != "n") == [each] * 4


@pytest.mark.parametrize("raw, what", [(b"[1, 2]", "not a JSON object"), (b"{not json", "JSON")])
def test_a_document_that_is_not_a_json_object_is_named(stores, raw, what):
    make, put_raw = stores
    put_raw("security/users", raw)
    store = make()
    with pytest.raises(CoordinationError, match=f"security/users.*{what}"):
        store.read_document("security/users")
    with pytest.raises(CoordinationError, match="security/users"):
        store.update_document("security/users", lambda doc: doc)
