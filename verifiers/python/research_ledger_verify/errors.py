"""The two ways a check ends badly, as the bundle page numbers them."""


class Invalid(Exception):
    """The input is not what it claims: `location` says where, `problem` what."""

    def __init__(self, location: str, problem: str):
        super().__init__(f"{location}: {problem}")
        self.location = location
        self.problem = problem


class Unreadable(Exception):
    """The input could not be read at all."""
