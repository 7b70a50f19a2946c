"""``python -m schemas DIR``: write a JSON Schema file per record into DIR."""

import sys
from pathlib import Path

from schemas.export import export_json_schemas

if __name__ == "__main__":
    target = Path(sys.argv[1] if len(sys.argv) > 1 else "schema-export")
    for path in export_json_schemas(target):
        print(path)
