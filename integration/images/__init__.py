"""The image tests (a package, so that its conftest is `images.conftest` and does not shadow
integration/conftest.py, which other test modules import as `conftest`)."""
