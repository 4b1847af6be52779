"""A listed Table is encoded row by row (the decoded objects of a big list never pile up): its
bytes are those of the Table object built at once, for every includeObject, version and page."""

from __future__ import annotations

import orjson
import pytest
from kube.fixtures import make_registry

from nodeagent.cluster.apiserver.encoding import table_list, table_object, table_row_bytes
from nodeagent.cluster.registry.options import Context, ListOptions
from nodeagent.cluster.registry.table import IncludeObject


@pytest.mark.parametrize("include", ["Metadata", "Object", "None"])
@pytest.mark.parametrize("version", ["v1", "v1beta1"])
async def test_table_list_bytes_equal_the_table_object(include: IncludeObject, version: str) -> None:
    reg, _store, _clock = await make_registry()
    try:
        pods = reg.resource("", "v1", "pods")
        for i in range(5):
            await pods.create("default", {"metadata": {"name": f"p{i}", "labels": {"a": str(i)}},
                                          "spec": {"containers": [{"name": "c", "image": "i"}]}},
                              Context(field_manager="t"))
        for opts in (ListOptions(), ListOptions(limit=2)):
            listed = await pods.list(None, opts)
            want = orjson.dumps(table_object(pods, listed.items, str(listed.revision), 1000.0, include, version,
                                             continue_token=listed.continue_token, remaining=listed.remaining))
            rows, meta = await pods.list_as(None, opts, lambda o: table_row_bytes(pods, o, 1000.0, include))
            got = table_list(pods, rows, str(meta.revision), version, continue_token=meta.continue_token,
                             remaining=meta.remaining)
            assert got == want
            assert len(orjson.loads(got)["rows"]) == (2 if opts.limit else 5)
    finally:
        await reg.close()
