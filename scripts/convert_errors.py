"""What the project's converters (st_to_gguf.py, gguf_to_mlx.py) exit with.

Both say a failure one way: a ConvertError carries the message and the exit
code (1: a file that cannot be read as what it claims; 2: a model this
converter does not handle), and main prints the message and exits with it.
Imported from the converter's own folder, so it needs no package.
"""

EXIT_BAD_FILE = 1
EXIT_UNSUPPORTED = 2


class ConvertError(Exception):
    def __init__(self, message: str, code: int):
        super().__init__(message)
        self.code = code


def unsupported(message: str) -> ConvertError:
    return ConvertError(message, EXIT_UNSUPPORTED)


def bad_file(message: str) -> ConvertError:
    return ConvertError(message, EXIT_BAD_FILE)
