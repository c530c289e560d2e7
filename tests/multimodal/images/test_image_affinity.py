from fleetgate.multimodal.images.affinity import ImageAffinity


def test_prefers_the_replica_that_encoded_most_of_the_images() -> None:
    now = [0.0]
    aff = ImageAffinity(max_entries=3, ttl_s=10, clock=lambda: now[0])
    aff.record(["k1", "k2"], "rep-a")
    aff.record(["k3"], "rep-b")
    assert aff.preferred(["k1", "k2", "k3"], ["rep-a", "rep-b"]) == "rep-a"
    assert aff.preferred(["k1"], ["rep-b"]) is None  # rep-a is not a candidate now
    assert aff.preferred(["zz"], ["rep-a"]) is None
    aff.record(["k4"], "rep-b")  # capacity 3: k1 (oldest) falls out
    assert aff.preferred(["k1", "k3"], ["rep-a", "rep-b"]) == "rep-b"
    now[0] = 11.0
    assert aff.preferred(["k2", "k3", "k4"], ["rep-a", "rep-b"]) is None  # expired
