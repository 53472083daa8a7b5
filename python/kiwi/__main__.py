"""The `kiwi` command installed by `pip install .`: the C++ command-line tool, run in-process."""
import sys

from kiwi import _kiwi


def main() -> None:
    sys.stdout.flush()
    sys.exit(_kiwi.main(sys.argv[1:]))


if __name__ == "__main__":
    main()
