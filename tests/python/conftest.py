"""The Python tests run against the installed package (pip install .; scripts/test.sh does)."""

from __future__ import annotations


def pytest_report_header(config):
    import tide

    return f"tide {tide.__version__} from {tide.__file__}"
