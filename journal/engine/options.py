"""The options of a journal handle, with their limits (units in the names)."""

from __future__ import annotations

from dataclasses import dataclass, field

from journal.engine import format as fmt
from journal.engine.dictionary import DictionaryUse

# The largest record_size_bytes_max a handle may have: a record's stored payload (its key and
# compression's framing included) must fit a frame. What a command reads and writes with, so it
# takes any record a writer could have stored (the journal does not record the writer's limit).
RECORD_SIZE_BYTES_MAX_LIMIT = fmt.FRAME_STORED_BYTES_LIMIT - fmt.RECORD_STORED_OVERHEAD_BYTES_MAX


@dataclass(frozen=True)
class Options:
    segment_size_bytes: int = fmt.SEGMENT_SIZE_BYTES_DEFAULT
    record_size_bytes_max: int = fmt.RECORD_SIZE_BYTES_MAX_DEFAULT
    index_interval_bytes: int = fmt.INDEX_INTERVAL_BYTES_DEFAULT
    compress: bool = True
    # 0 assumes powersafe overwrite (an unsynced write never damages synced bytes of the same
    # sector). On storage without it, set the sector size: every synced batch is then padded to
    # a sector boundary, so no later write shares a sector with synced data (SQLite's answer).
    sector_bytes: int = 0
    # The live segment's size is set this far past its last record, in advance, and cut back at
    # seal and close: an fdatasync after a write that does not change the file size skips the
    # metadata commit (measured ~1.3x more syncs per second on ext4). 0 turns it off.
    reserve_bytes: int = fmt.RESERVE_BYTES_DEFAULT
    # Records appended together (append_many, a run of buffered appends, sync appends that meet
    # in one group commit) may share block frames of up to this many bytes of payload,
    # compressed as one: fewer bytes and cheaper reads than a frame each, while a point read
    # decodes the whole block (bench/README.md, "Block frames").
    # 0: a frame for every record, as in format version 1.
    block_bytes: int = fmt.BLOCK_BYTES_DEFAULT
    # The trained zstd dictionary a writable handle compresses data frames and blocks with (format
    # version 4; installed in the journal directory at open), from the first append that meets a
    # live segment of version 4 on. None: no dictionary.
    dictionary: DictionaryUse | None = field(default=None, compare=False)

    def check(self) -> None:
        sector_min = fmt.SECTOR_BYTES_MIN
        if self.sector_bytes and (self.sector_bytes < sector_min or self.sector_bytes & (self.sector_bytes - 1)):
            raise ValueError(f"sector_bytes must be 0 or a power of two of at least {sector_min}")
        if not fmt.SEGMENT_SIZE_BYTES_MIN <= self.segment_size_bytes <= fmt.SEGMENT_SIZE_BYTES_MAX:
            raise ValueError("segment_size_bytes must be between 4 KiB and 1 TiB")
        record_max = RECORD_SIZE_BYTES_MAX_LIMIT
        if not 1 <= self.record_size_bytes_max <= record_max:
            raise ValueError(f"record_size_bytes_max must be between 1 and {record_max}")
        if not 0 <= self.reserve_bytes <= fmt.RESERVE_BYTES_MAX:
            raise ValueError("reserve_bytes must be between 0 (off) and 1 GiB")
        if not 0 <= self.block_bytes <= fmt.BLOCK_BYTES_LIMIT:
            raise ValueError(f"block_bytes must be between 0 (off) and {fmt.BLOCK_BYTES_LIMIT}")
        if self.index_interval_bytes < fmt.INDEX_INTERVAL_BYTES_MIN:
            raise ValueError(f"index_interval_bytes must be at least {fmt.INDEX_INTERVAL_BYTES_MIN}")
