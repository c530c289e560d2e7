import base64

import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.multimodal.images.fetch import FetchPolicy, ImageFetcher

LOCAL = FetchPolicy(allow_http=True, allow_cidrs=["127.0.0.1/32"], timeout_s=2.0)


async def test_loopback_url_is_refused_before_connecting(
    image_server: tuple[str, list[str]],
) -> None:
    base, hits = image_server
    async with ImageFetcher(FetchPolicy(allow_http=True)) as fetcher:
        with pytest.raises(InvalidRequest, match="non-public address") as info:
            await fetcher.fetch(f"{base}/img.png", param="messages[0].content[1].image_url")
    assert info.value.status == 400
    assert info.value.param == "messages[0].content[1].image_url"
    assert hits == []


async def test_hostname_resolving_to_loopback_is_refused(
    image_server: tuple[str, list[str]],
) -> None:
    base, hits = image_server
    port = base.rsplit(":", 1)[1]
    async with ImageFetcher(FetchPolicy(allow_http=True)) as fetcher:
        with pytest.raises(InvalidRequest, match="non-public"):
            await fetcher.fetch(f"http://localhost:{port}/img.png")
    assert hits == []


@pytest.mark.parametrize(
    "url", ["https://10.0.0.5/a.png", "https://[::ffff:192.168.0.1]/a.png", "https://[fe80::1]/a"]
)
async def test_private_literal_addresses_are_refused(url: str) -> None:
    async with ImageFetcher() as fetcher:
        with pytest.raises(InvalidRequest, match="non-public"):
            await fetcher.fetch(url)


async def test_allow_listed_loopback_fetches(
    image_server: tuple[str, list[str]], png_bytes: bytes
) -> None:
    base, _ = image_server
    async with ImageFetcher(LOCAL) as fetcher:
        assert await fetcher.fetch(f"{base}/img.png") == png_bytes
        assert await fetcher.fetch(f"{base}/to-self") == png_bytes


async def test_redirect_to_private_address_is_refused(
    image_server: tuple[str, list[str]],
) -> None:
    base, hits = image_server
    async with ImageFetcher(LOCAL) as fetcher:
        with pytest.raises(InvalidRequest, match="10.0.0.7"):
            await fetcher.fetch(f"{base}/to-private")
    assert hits == ["/to-private"]


async def test_redirect_loop_is_bounded(image_server: tuple[str, list[str]]) -> None:
    base, hits = image_server
    async with ImageFetcher(LOCAL) as fetcher:
        with pytest.raises(InvalidRequest, match="redirected more than 3"):
            await fetcher.fetch(f"{base}/loop")
    assert len(hits) == 4


async def test_http_needs_opt_in_and_other_schemes_are_refused() -> None:
    async with ImageFetcher() as fetcher:
        with pytest.raises(InvalidRequest, match="scheme 'http'"):
            await fetcher.fetch("http://example.com/a.png")
        with pytest.raises(InvalidRequest, match="scheme 'file'"):
            await fetcher.fetch("file:///etc/passwd")


async def test_streamed_body_over_limit_is_aborted(image_server: tuple[str, list[str]]) -> None:
    base, _ = image_server
    policy = LOCAL.model_copy(update={"max_bytes": 100_000})
    async with ImageFetcher(policy) as fetcher:
        with pytest.raises(InvalidRequest, match="larger than 100000") as info:
            await fetcher.fetch(f"{base}/big")
    assert info.value.code == "image_too_large"


async def test_slow_server_times_out(image_server: tuple[str, list[str]]) -> None:
    base, _ = image_server
    policy = LOCAL.model_copy(update={"timeout_s": 0.3})
    async with ImageFetcher(policy) as fetcher:
        with pytest.raises(InvalidRequest, match="did not answer within 0.3s"):
            await fetcher.fetch(f"{base}/slow")


async def test_data_urls(png_bytes: bytes) -> None:
    url = "data:image/png;base64," + base64.b64encode(png_bytes).decode()
    async with ImageFetcher(FetchPolicy(max_bytes=len(png_bytes))) as fetcher:
        assert await fetcher.fetch(url) == png_bytes
    async with ImageFetcher(FetchPolicy(max_bytes=len(png_bytes) - 1)) as fetcher:
        with pytest.raises(InvalidRequest, match="larger than"):
            await fetcher.fetch(url)
        with pytest.raises(InvalidRequest, match="base64"):
            await fetcher.fetch("data:image/png;base64,@@@@")
