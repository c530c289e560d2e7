from pathlib import Path

from fleetgate.multimodal.images.cache import ProcessedImageCache, image_cache_key
from fleetgate.multimodal.images.process import ProcessedImage, ProcessingParams
from fleetgate.telemetry.registry import Registry


def img(n: int, size: int = 100) -> ProcessedImage:
    return ProcessedImage(bytes([n % 256]) * size, "image/png", 10, 10, f"{n:064x}")


def metric(reg: Registry, name: str, *labels: str) -> float:
    m = reg.get(name)
    assert m is not None
    return float(m.labels(*labels).value)  # type: ignore[attr-defined]


def test_key_depends_on_source_and_params() -> None:
    a = image_cache_key(b"abc", ProcessingParams())
    assert a == image_cache_key(b"abc", ProcessingParams())
    assert a != image_cache_key(b"abd", ProcessingParams())
    assert a != image_cache_key(b"abc", ProcessingParams(max_pixels=1000))


async def test_one_tenant_filling_the_cache_keeps_the_others_quota() -> None:
    reg = Registry()
    cache = ProcessedImageCache(max_bytes=1000, tenant_quota_bytes=300, registry=reg)
    for i in range(3):  # tenant B uses exactly its quota
        assert await cache.put(f"b{i}", img(i), tenant="b")
    for i in range(50):  # tenant A floods
        await cache.put(f"a{i}", img(100 + i), tenant="a")
    for i in range(3):
        assert await cache.get(f"b{i}") is not None
    assert cache.tenant_bytes("b") == 300
    assert cache.tenant_bytes("a") == 700
    assert "a49" in cache and "a0" not in cache  # A recycled its own oldest entries
    assert metric(reg, "fleetgate_image_cache_evictions_total", "memory") == 43
    assert cache.nbytes <= 1000


async def test_over_quota_entries_of_others_are_evictable_oldest_first() -> None:
    cache = ProcessedImageCache(max_bytes=1000, tenant_quota_bytes=300)
    for i in range(10):
        await cache.put(f"a{i}", img(i), tenant="a")  # A over quota (shared space is free)
    assert cache.tenant_bytes("a") == 1000
    await cache.put("b0", img(50), tenant="b")
    assert "a0" not in cache and "a1" in cache and "b0" in cache


async def test_lru_hit_refreshes_and_metrics_count() -> None:
    reg = Registry()
    cache = ProcessedImageCache(max_bytes=300, tenant_quota_bytes=300, registry=reg)
    for i in range(3):
        await cache.put(f"k{i}", img(i), tenant="t")
    assert await cache.get("k0") is not None  # k0 becomes most recent
    await cache.put("k3", img(3), tenant="t")
    assert "k0" in cache and "k1" not in cache
    assert await cache.get("k1") is None
    assert metric(reg, "fleetgate_image_cache_hits_total", "memory") == 1
    assert metric(reg, "fleetgate_image_cache_misses_total") == 1


async def test_disk_tier_survives_a_new_cache(tmp_path: Path) -> None:
    reg = Registry()
    first = ProcessedImageCache(max_bytes=1000, tenant_quota_bytes=500, disk_dir=tmp_path)
    await first.put("key1", img(7), tenant="t")
    second = ProcessedImageCache(
        max_bytes=1000, tenant_quota_bytes=500, disk_dir=tmp_path, registry=reg
    )
    got = await second.get("key1", tenant="t")
    assert got == img(7)
    assert metric(reg, "fleetgate_image_cache_hits_total", "disk") == 1
    assert "key1" in second


async def test_one_tenant_flooding_the_disk_tier_keeps_the_others_share(tmp_path: Path) -> None:
    def cache() -> ProcessedImageCache:
        return ProcessedImageCache(
            max_bytes=10_000,
            tenant_quota_bytes=5_000,
            disk_dir=tmp_path,
            max_disk_bytes=3_000,
            tenant_disk_quota_bytes=1_200,  # a file is 200 bytes of image and its header
        )

    first = cache()
    for i in range(3):  # tenant B's files: within its disk share (about 1,050 bytes)
        await first.put(f"b{i}", img(i, 200), tenant="b")
    for i in range(40):  # tenant A floods the disk
        await first.put(f"a{i}", img(100 + i, 200), tenant="a")
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert sum(p.stat().st_size for p in files) <= 3_000
    assert await cache().get("b0", tenant="a") is None  # a tenant reads only its own files
    later = cache()  # a new process: only the disk tier is left
    for i in range(3):
        assert await later.get(f"b{i}", tenant="b") == img(i, 200)
    assert await later.get("a39", tenant="a") == img(139, 200)  # A recycled its own files
    assert await later.get("a0", tenant="a") is None
