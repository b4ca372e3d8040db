import pytest

from helpers import draft_everything, torch_threads  # noqa: F401 (draft_everything: an autouse fixture)


@pytest.fixture(autouse=True)
def one_thread():
    with torch_threads(1):
        yield
