"""Image files of the session store: lossless PNGs named by their content hash, written whole.

    images/ab/<sha256>.png      every image once (respec.images.content_hash of its pixels)

`save_png` is the pack's one atomic writer of content-addressed PNGs (the store's images here,
the benchmark's per-scenario images in respec/bench/runner.py).
"""
from __future__ import annotations

import os
import re
import threading
import uuid
import weakref
from io import BytesIO
from pathlib import Path
from typing import Any, Iterator

import numpy as np

from ..errors import InputError, StoreError
from ..history import StoredImage
from ..images import as_array, as_pil, content_hash, open_image

_DIGEST = re.compile(r"[0-9a-f]{64}")
_BASE_ARRAY = StoredImage.__dict__["array"]   # the slot that holds a decoded array


def fsync_dir(path: Path) -> None:
    """Flush a folder's entries (a rename or link in it) to disk, where the system allows it."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. Windows cannot open directories; the rename is still atomic there
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def save_png(path: Path, image: Any, compress_level: int) -> bool:
    """Make sure `path` holds `image` (array, PIL or StoredImage) as a lossless PNG; True when
    this call wrote it.

    `path` is named after the image's content hash, so a file already there holds this image: it
    is kept, with a fresh mtime (an age-based clean-up such as SessionStore.gc then spares a file
    that a transaction in progress is about to refer to). A new file is complete before it appears
    under its name (temp file + fsync + rename + folder fsync): a crash leaves at most a temp file
    `.<name>.<pid>.<random>.tmp` beside it. OSError when it cannot be written (the temp file is
    removed)."""
    if path.exists():
        try:
            os.utime(path)
        except OSError:
            pass
        return False
    buf = BytesIO()
    as_pil(StoredImage.of(image).array).save(buf, format="PNG", compress_level=compress_level)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
    try:
        with open(tmp, "xb") as f:
            f.write(buf.getvalue())
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError:
        try:
            tmp.unlink()
        except OSError:
            pass
        raise
    fsync_dir(path.parent)
    return True


class LazyStoredImage(StoredImage):
    """A StoredImage whose pixels stay in their PNG until first read (then kept, read-only).

    Loading a long session therefore costs no decoding; the size is known without decoding.
    Pickling or deep-copying yields a plain StoredImage with the pixels.
    """

    __slots__ = ("_files", "_shape", "__weakref__")

    def __init__(self, files: "ImageFiles", digest: str, shape: tuple[int, int, int],
                 array: np.ndarray | None = None):
        self.digest = digest
        self._files = files
        self._shape = tuple(int(x) for x in shape)
        if array is not None:
            _BASE_ARRAY.__set__(self, array)

    @property
    def array(self) -> np.ndarray:  # type: ignore[override]
        """The pixels, read from the store's files on first use and kept."""
        try:
            return _BASE_ARRAY.__get__(self, StoredImage)
        except AttributeError:
            arr = self._files.get(self.digest)
            _BASE_ARRAY.__set__(self, arr)
            return arr

    @property
    def decoded(self) -> bool:
        """True once the pixels are in memory."""
        try:
            _BASE_ARRAY.__get__(self, StoredImage)
            return True
        except AttributeError:
            return False

    @property
    def shape(self) -> tuple[int, int, int]:
        """(height, width, channels) without decoding."""
        return self._shape

    @property
    def size(self) -> tuple[int, int]:
        """(width, height), as PIL reports it, without decoding."""
        return (self._shape[1], self._shape[0])

    def __reduce__(self):
        return (StoredImage, (self.array, self.digest))

    def __repr__(self) -> str:
        return f"LazyStoredImage({self._shape}, {self.digest[:10]}, decoded={self.decoded})"


class ImageFiles:
    """Content-addressed, lossless PNG files: `<dir>/<d[:2]>/<digest>.png`, one per distinct image.

    L, RGB and RGBA uint8 images (H×W×C, C = 1, 3, 4) of any size round-trip bit-identically.
    """

    def __init__(self, directory: Path, compress_level: int = 4):
        self.dir = Path(directory)
        self.compress_level = int(compress_level)
        self._live: "weakref.WeakValueDictionary[str, LazyStoredImage]" = weakref.WeakValueDictionary()
        self._lock = threading.Lock()

    def path(self, digest: str) -> Path:
        """Where the PNG of `digest` lives (whether or not it exists)."""
        if not isinstance(digest, str) or not _DIGEST.fullmatch(digest):
            raise InputError(f"{digest!r} is not an image digest (64 lowercase hex characters)")
        return self.dir / digest[:2] / f"{digest}.png"

    def put(self, image: Any) -> LazyStoredImage:
        """Store an image (array, PIL or StoredImage) once; return it as a shared stored image.
        Its file is complete on disk when this returns."""
        src = StoredImage.of(image)
        path = self.path(src.digest)
        try:
            save_png(path, src, self.compress_level)
        except OSError as e:
            raise StoreError(f"could not write image file {path}: {e}. Check free disk space and "
                             f"that the store directory {self.dir.parent} is writable.") from e
        return self._share(src.digest, src.array.shape, src.array)

    def _share(self, digest: str, shape, array: np.ndarray | None = None) -> LazyStoredImage:
        with self._lock:
            img = self._live.get(digest)
            if img is None:
                img = LazyStoredImage(self, digest, shape, array)
                self._live[digest] = img
            elif array is not None and not img.decoded:
                _BASE_ARRAY.__set__(img, array)
            return img

    def lazy(self, digest: str, shape) -> LazyStoredImage:
        """The stored image `digest` without decoding it (shared with every other holder)."""
        return self._share(digest, shape)

    def get(self, digest: str) -> np.ndarray:
        """Decode the PNG of `digest` into a read-only uint8 H×W×C array, checking its hash. A file
        that is a link leading outside the store is refused, whatever it holds."""
        path = self.path(digest)
        if path.is_symlink():
            try:
                inside = path.resolve().is_relative_to(self.dir.resolve())
            except OSError:
                inside = False
            if not inside:
                raise StoreError(f"image file {path} is a link to a file outside the store; ReSpec "
                                 "reads only the store's own files. Replace the link with the file.")
        try:
            # The pack's one opener; the store's own images are not held to the photo size limit.
            arr = as_array(open_image(path, "image file", max_pixels=None))
        except InputError as e:
            if not os.path.lexists(path):
                raise StoreError(f"image file {path} is missing: the store directory {self.dir.parent} "
                                 "was changed outside ReSpec. Restore the file or rewind the session "
                                 "before the turn that uses it.") from e
            raise StoreError(f"image file {path} is damaged ({e}); restore it from a backup or "
                             "rewind the session before the turn that uses it.") from e
        except (OSError, ValueError) as e:
            raise StoreError(f"image file {path} is damaged ({e}); restore it from a backup or "
                             "rewind the session before the turn that uses it.") from e
        if arr.flags.writeable:
            arr.flags.writeable = False
        if content_hash(arr) != digest:
            raise StoreError(f"image file {path} does not hold the image it is named after "
                             "(damaged or replaced); restore it or rewind the session.")
        return arr

    def unreferenced(self, used: set[str], older_than: float) -> Iterator[tuple[Path, int]]:
        """(path, bytes) of each image file whose digest is not in `used`, and of each leftover
        temp file, last changed before the time `older_than`, as the folder is read (the newest
        files are spared: an append writes its PNG before the transaction that refers to it)."""
        if not self.dir.is_dir():
            return
        for path in self.dir.glob("*/*"):
            name = path.name
            digest = name[:-4] if name.endswith(".png") else None
            if digest in used or not (name.endswith(".tmp") or digest is not None):
                continue
            try:
                st = path.stat()
            except FileNotFoundError:
                continue
            if st.st_mtime < older_than:
                yield path, st.st_size
