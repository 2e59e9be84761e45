"""One error type for bad input, so the CLI can print one line instead of a traceback."""


class InputError(Exception):
    """A file we read is missing, unreadable or not shaped as the kernel writes it.

    The message always names the file, so an SRE can go and look at it.
    """

    def __init__(self, path: str, problem: str):
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")
