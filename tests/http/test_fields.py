import pytest

from fleetgate.errors import InvalidRequest
from fleetgate.http.fields import optional_array


def test_a_list_is_itself_and_none_is_empty() -> None:
    items = [{"type": "function"}]
    assert optional_array(items, "tools") is items
    assert optional_array(None, "tools") == []


@pytest.mark.parametrize("value", [{}, "tools", 1, True])
def test_anything_else_is_a_400_naming_the_field(value: object) -> None:
    with pytest.raises(InvalidRequest) as info:
        optional_array(value, "messages[2].tool_calls")
    assert info.value.status == 400
    assert info.value.param == "messages[2].tool_calls"
    assert info.value.message == "'tool_calls' must be an array"
