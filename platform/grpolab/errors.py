"""Errors the platform raises on purpose, each with a message a user can act on."""


class ConfigError(ValueError):
    """Bad user input: names the key, what was wrong, and what is valid. Raised before any
    model is loaded or any MLflow run is created; the CLI maps it to exit code 2."""


class NonFiniteLossError(FloatingPointError):
    """The training loss became NaN or infinite: the run stops and is recorded FAILED."""


class NotImplementedMethodError(ConfigError):
    """A registered method whose axis values are not implemented yet was requested."""
