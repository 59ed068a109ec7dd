"""`moto_server` with atomic conditional PUTs, as S3 has them.

moto's `put_object` checks `If-None-Match: *` / `If-Match` and then stores the object without a lock, and
its server is threaded: two concurrent create-only PUTs of one key can both succeed (seen: two lake-catalog
publications of one generation under `make test -n 2`). S3 guarantees that exactly one wins, and the lake
catalog and deltalake's commits rely on that. This wrapper serialises moto's `put_object` (the check and
the write) with one lock; everything else is moto unchanged.

Run as `python tests/atomic_moto.py -H 127.0.0.1 -p PORT` (the arguments of `moto_server`).
"""

from __future__ import annotations

import functools
import threading
from typing import Any

from moto.s3.responses import S3Response
from moto.server import main

_LOCK = threading.Lock()
_put_object = S3Response.put_object


@functools.wraps(_put_object)
def _atomic_put_object(self: S3Response, *args: Any, **kwargs: Any) -> Any:
    with _LOCK:
        return _put_object(self, *args, **kwargs)


S3Response.put_object = _atomic_put_object  # type: ignore[method-assign]

if __name__ == "__main__":
    main()
