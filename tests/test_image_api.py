"""The agent API's image routes over a fake ImageBackend: status codes, Status bodies, fields."""

from __future__ import annotations

from typing import Any

import pytest
from aiohttp.test_utils import TestClient

from nodeagent.agent.api.app import create_app
from nodeagent.agent.api.images import add_image_routes
from nodeagent.agent.images import errors as E
from nodeagent.agent.images.manager import GCResult
from nodeagent.agent.images.records import ImageConfig, ImageRecord, Layer
from nodeagent.agent.images.reference import parse_reference

D = "sha256:" + "c" * 64
M = "sha256:" + "d" * 64
L = "sha256:" + "e" * 64


def record(tag: str = "127.0.0.1:5000/app:1") -> ImageRecord:
    return ImageRecord(D, M, 300, 200, (Layer(L, "application/vnd.oci.image.layer.v1.tar+gzip", 1000, L, 4096),),
                       ImageConfig(entrypoint=("/bin/sh",)), repo_tags=(tag,), repo_digests=(), architecture="amd64",
                       first_seen=1_700_000_000, last_used=1_700_000_100)


class FakeImages:
    def __init__(self) -> None:
        self.records = [record()]
        self.pulls: list[tuple[str, str]] = []
        self.fail: Exception | None = None
        self.leased: dict[str, list[str]] = {}

    def images(self) -> list[ImageRecord]:
        return self.records

    def get(self, text: str) -> ImageRecord:
        for r in self.records:
            if text in r.repo_tags or r.id.startswith(text) or r.id.removeprefix("sha256:").startswith(text):
                return r
        raise E.NotPresent(f"no image {text!r} on this node")

    async def pull(self, image: str, policy: str = "Always", *, field_path: str = "image") -> ImageRecord:
        parse_reference(image, field_path)
        self.pulls.append((image, policy))
        if self.fail:
            raise self.fail
        return record(image)

    async def import_image(self, path: str, fmt: str, tag: str | None = None,
                           ref_name: str | None = None) -> ImageRecord:
        if fmt not in ("oci", "docker-archive"):
            from nodeagent.core.errors import FieldError
            raise FieldError("format", "Unsupported value")
        return record(tag or "imported:1")

    async def remove(self, text: str) -> ImageRecord:
        r = self.get(text)
        if self.leased.get(r.id):
            raise E.InUse(text, self.leased[r.id])
        self.records.remove(r)
        return r

    async def garbage_collect(self) -> GCResult:
        return GCResult(removed=[D], bytes_freed=5000, goal=4000, reason="threshold")

    def progress(self) -> list[dict[str, Any]]:
        return [{"image": "x", "phase": "downloading", "bytesDone": 1, "bytesTotal": 2, "seconds": 0.5}]

    def holders(self, image_id: str) -> list[str]:
        return self.leased.get(image_id, [])


@pytest.fixture
def images() -> FakeImages:
    return FakeImages()


@pytest.fixture
async def client(aiohttp_client: Any, images: FakeImages) -> TestClient:
    app = create_app(object())  # type: ignore[arg-type]  # the pod routes are not called here
    add_image_routes(app, images)
    return await aiohttp_client(app)


async def test_list_and_get(client: TestClient) -> None:
    resp = await client.get("/api/v1/images")
    assert resp.status == 200
    body = await resp.json()
    assert body["kind"] == "ImageList"
    item = body["items"][0]
    assert item["id"] == D and item["repoTags"] == ["127.0.0.1:5000/app:1"]
    assert item["size"] == 300 + 200 + 1000 + 4096 and item["lastUsed"] == "2023-11-14T22:15:00Z"
    assert item["config"]["entrypoint"] == ["/bin/sh"] and item["inUseBy"] == []
    one = await client.get("/api/v1/images/" + "127.0.0.1:5000%2Fapp:1")
    assert one.status == 200 and (await one.json())["id"] == D
    missing = await client.get("/api/v1/images/nope")
    assert missing.status == 404 and (await missing.json())["kind"] == "Status"


async def test_pull(client: TestClient, images: FakeImages) -> None:
    resp = await client.post("/api/v1/images/pull", json={"image": "busybox:1", "policy": "IfNotPresent"})
    assert resp.status == 201
    assert images.pulls == [("busybox:1", "IfNotPresent")]
    assert (await client.post("/api/v1/images/pull", json={"image": "busybox"})).status == 201
    assert images.pulls[-1] == ("busybox", "Always")


@pytest.mark.parametrize("body, code, field", [
    ({}, 422, "image"),
    ({"image": 5}, 422, "image"),
    ({"image": "Bad/Name"}, 422, "image"),
    ({"image": "busybox", "policy": 3}, 422, "policy"),
])
async def test_pull_bad_input_names_the_field(client: TestClient, body: dict[str, Any], code: int, field: str) -> None:
    resp = await client.post("/api/v1/images/pull", json=body)
    assert resp.status == code
    status = await resp.json()
    assert status["reason"] == "Invalid" and status["details"]["causes"][0]["field"] == field


async def test_pull_not_json(client: TestClient) -> None:
    resp = await client.post("/api/v1/images/pull", data=b"{nope", headers={"Content-Type": "application/json"})
    assert resp.status == 400
    resp = await client.post("/api/v1/images/pull", json=["busybox"])
    assert resp.status == 400


@pytest.mark.parametrize("error, code", [
    (E.ImageNotFound("manifest unknown"), 404),
    (E.Unauthorized("authentication required"), 502),
    (E.RegistryUnavailable("i/o timeout"), 502),
    (E.NoSpace("no space left"), 507),
])
async def test_pull_failures_are_status_with_the_kubelet_reason(client: TestClient, images: FakeImages,
                                                                error: E.ImageError, code: int) -> None:
    images.fail = error
    resp = await client.post("/api/v1/images/pull", json={"image": "busybox:1"})
    assert resp.status == code
    status = await resp.json()
    assert status["reason"] == "ErrImagePull" and status["message"] == f"ErrImagePull: {error.message}"


async def test_import(client: TestClient) -> None:
    resp = await client.post("/api/v1/images/import", json={"path": "/srv/img", "format": "oci", "tag": "a:1"})
    assert resp.status == 201 and (await resp.json())["repoTags"] == ["a:1"]
    resp = await client.post("/api/v1/images/import", json={"path": "/srv/img", "format": "zip"})
    assert resp.status == 422 and (await resp.json())["details"]["causes"][0]["field"] == "format"
    assert (await client.post("/api/v1/images/import", json={"format": "oci"})).status == 422


async def test_remove_refused_while_in_use(client: TestClient, images: FakeImages) -> None:
    images.leased[D] = ["default_web_uid_app"]
    resp = await client.delete("/api/v1/images/127.0.0.1:5000%2Fapp:1")
    assert resp.status == 409
    assert "default_web_uid_app" in (await resp.json())["message"]
    images.leased.clear()
    resp = await client.delete("/api/v1/images/" + D.removeprefix("sha256:")[:12])
    assert resp.status == 200 and images.records == []
    assert (await client.delete("/api/v1/images/gone")).status == 404


async def test_gc_and_pulls(client: TestClient) -> None:
    resp = await client.post("/api/v1/images/gc")
    assert resp.status == 200 and (await resp.json())["bytesFreed"] == 5000
    resp = await client.get("/api/v1/images/pulls")
    assert (await resp.json())["items"][0]["phase"] == "downloading"
