"""``GET /checkpoints/<id>/hf.tar``: a converted (Hugging Face) checkpoint as one tar archive,
streamed straight from its directory: no temporary copy of the weights, on disk or in memory.

The archive is written here block by block rather than through ``tarfile.open(mode="w|")``:
``tarfile.addfile`` copies a whole member in one call into the file object it writes to, so a
generator on top of it would hold a whole weights shard in memory before sending any of it.
Each member is its PAX header (``TarInfo.tobuf``: any name length, any size), its bytes read
MEMBER_CHUNK at a time, and the zero padding to the next 512-byte block; two zero blocks end
the archive. The sizes are known before the first byte, so the answer carries its
``Content-Length`` (a browser shows the download's progress). Python's ``tarfile``, GNU tar
and ``transformers.from_pretrained`` on the extracted directory read it.

Members are the regular files under the converted directory (symlinks are neither followed nor
packed), under one top directory named after the run and the checkpoint. Owner and staff only:
another user's checkpoint is a 404; one that is not converted (or whose directory is gone) is
a 409 saying so.
"""

from __future__ import annotations

import logging
import tarfile
from collections.abc import Iterator
from pathlib import Path

from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from webapp.accounts.access import authorize_hidden
from webapp.audit.record import Actor
from webapp.checkpoints.models import Checkpoint
from webapp.checkpoints.views import converted_dir

log = logging.getLogger(__name__)

BLOCK = tarfile.BLOCKSIZE  # 512
MEMBER_CHUNK = 1 << 20
END = b"\0" * (2 * BLOCK)


def archive_name(checkpoint: Checkpoint) -> str:
    stage = f"{checkpoint.stage}-" if checkpoint.stage else ""
    return f"run-{checkpoint.run_id}-{stage}step-{checkpoint.step}-hf"


def _padding(size: int) -> int:
    return -size % BLOCK


def members(root: Path, top: str) -> list[tuple[Path, bytes, int]]:
    """``(path, tar header, size)`` of each regular file under ``root``, by path."""
    found = []
    for path in sorted(root.rglob("*")):
        if path.is_symlink() or not path.is_file():
            continue
        stat = path.stat()
        info = tarfile.TarInfo(f"{top}/{path.relative_to(root).as_posix()}")
        info.size, info.mtime, info.mode = stat.st_size, int(stat.st_mtime), 0o644
        header = info.tobuf(format=tarfile.PAX_FORMAT, encoding="utf-8", errors="strict")
        found.append((path, header, stat.st_size))
    return found


def archive_size(entries: list[tuple[Path, bytes, int]]) -> int:
    return sum(len(h) + size + _padding(size) for _, h, size in entries) + len(END)


def tar_stream(entries: list[tuple[Path, bytes, int]]) -> Iterator[bytes]:
    """The archive's bytes, a member's header then its content MEMBER_CHUNK at a time. A file
    that shrank since it was listed is padded with zeros to its listed size (and one that grew
    is cut there), so the archive stays well-formed and its announced length true."""
    for path, header, size in entries:
        yield header
        left = size
        with path.open("rb") as handle:
            while left > 0:
                piece = handle.read(min(MEMBER_CHUNK, left))
                if not piece:
                    log.warning("%s shrank while it was archived; padded with zeros", path)
                    piece = b"\0" * left
                left -= len(piece)
                yield piece
        if pad := _padding(size):
            yield b"\0" * pad
    yield END


@require_GET
def hf_archive(request: HttpRequest, pk: int) -> HttpResponse:
    checkpoint = authorize_hidden(
        Actor.from_request(request), Checkpoint, pk, "checkpoint.download"
    )
    root, reason = converted_dir(checkpoint)
    if root is None:
        context = {"checkpoint": checkpoint, "message": reason, "title": "Download refused"}
        return render(request, "checkpoints/convert_refused.html", context, status=409)
    top = archive_name(checkpoint)
    entries = members(root, top)
    response = StreamingHttpResponse(tar_stream(entries), content_type="application/x-tar")
    response["Content-Length"] = str(archive_size(entries))
    response["Content-Disposition"] = f'attachment; filename="{top}.tar"'
    return response
