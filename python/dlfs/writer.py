"""dlfs.Writer: write a volume sample by sample from Python."""
import operator
import os

import numpy as np

from ._dlfs import _VolumeWriter
from ._keywords import checked as _checked
from ._progress import Progress

__all__ = ["Writer"]


class Writer:
    """Writes a new volume, one sample at a time (C++ VolumeBuilder).

        with dlfs.Writer("train.dlfs", class_names=["cat", "dog"]) as w:
            for path, image_bytes, label in my_samples():
                w.add(path, image_bytes, label)   # streamed to disk now
        # here the volume exists, complete and synced, or not at all

    path: the volume to create (its target 0). Nothing appears there until
        close() succeeds, which the `with` block does when it ends without
        an exception. Samples stream to a temporary file beside it
        ("<path>.tmp.<pid>.<n>"), renamed into place once complete and
        synced. An exception inside the `with` block, abort(), or a writer
        dropped without close() leaves no volume and no temporary file.
    class_names: names of labels 0, 1, ... (a label may then also be given
        by its name); a label past the last name is refused. Without them
        the classes are named by their numbers ("0", "1", ...), as for tar
        shards packed without --class-names.
    targets: spread the samples over this many files (path, path.t1, ...),
        e.g. one per NVMe device; each sample goes whole to the file holding
        the fewest bytes so far.
    align: every sample starts at a multiple of this many bytes (a power
        of two up to 1 MiB; 4096 lets O_DIRECT reads fetch a sample without
        its neighbours), as dlfs.pack(align=) and `dlfs pack --align`. None
        packs samples back to back. alignment= is the same, its earlier name.
    force: replace an existing volume at `path` (when closing).
    compress: "zstd" or "zstd:LEVEL" (1..22; default level 3) compresses
        each field (a plain sample is one field), keeping it raw where that
        saves less than 3 %; None stores every byte raw. As `dlfs pack
        --compress`. Reads decompress transparently.
    dict: with compress, train a zstd dictionary (up to 110 KiB) on the
        first 8 MiB or 10,000 fields and compress every field with it: for
        many small, similar samples. Those first samples are held in memory
        until the dictionary is trained.
    progress: True shows the samples written so far (tqdm when installed,
        Debian's python3-tqdm, else one line on stderr).
    layout: the directory's layout (docs/format.md). "auto" (default):
        "compact" unless compress or image preparation is asked for, or the
        first sample is given as fields (then "tree"). "compact" (format v3)
        keeps 6-10 bytes per sample plus the names, written while samples
        stream (memory independent of their number) and used in place by
        readers; a sample's index is the order it was added in, and names
        are optional (write_batch without names). "tree" (format v1/v2)
        orders samples by path and holds fields, compression and prepared
        images; its directory stays in memory until close().
    tokens: "uint16" or "uint32" (keyword-only) writes a token volume
        (docs/format.md §10.11) for LLM pretraining: each sample is a
        document of token ids of that width, the documents lie back to back
        in one stream and are read by index, by token (Volume.document_at,
        Volume.read_tokens) or in windows by a token loader. Add documents
        with write_documents / write_document (no names; add() and
        write_batch take raw little-endian bytes). Compact layout, one
        target, no alignment, compression or image preparation.

    Image preparation (keyword-only; `dlfs pack`'s --max-side etc., FFCV's
    RGBImageField options; docs/format.md §4.9). Image fields — a plain
    sample's bytes, or fields named jpg/jpeg/png — are JPEG or PNG files:
    max_side: cap the longer side at this many pixels (the shorter in
        proportion, torchvision's Resize(max_size=N) geometry, PIL's pixels;
        never enlarged). FFCV's max_resolution.
    resize_filter: PIL's filter for it: "bilinear" (default), "bicubic",
        "lanczos", "box", "hamming".
    jpeg_quality: re-encode JPEGs at this quality (1..100); an original
        that needs no resize is kept when re-encoding would not shrink it.
        Encoded JPEGs use 90 without it.
    always_reencode: re-encode every image and keep the result even if larger.
    image_format: "keep" (each image in its format), "jpeg", "raw" (decoded
        uint8 HWC pixels with a 16-byte header: read without decoding),
        "smart" (raw up to smart_threshold bytes of pixels, JPEG above) or
        "proportion" (JPEG with probability jpeg_probability, chosen by
        image_seed and the sample's path), as FFCV's write_mode.
    image_color: channels of decoded images: "rgb" (PIL's convert("RGB"),
        default), "gray" or "auto" (1 for gray sources).
    prepare_threads: threads preparing images while add() goes on (0: one
        per core). add() returns before its image is prepared; an image that
        cannot be (not JPEG/PNG, damaged) raises from a later add() or
        close(), naming its sample — or, with skip_unreadable=True, is left
        out and counted in image_stats.

    add(path, data, label=None) adds one sample:
        path  where it goes inside the volume, '/'-separated ("cat/001.jpg");
              directories are implied. Volume order: the order of add()
              in the compact layout, by path in the tree layout.
        data  its bytes: bytes, bytearray, memoryview, or a numpy array (its
              raw bytes in C order; dtype and shape are not stored).
        label an int class id (below len(class_names) when they are given;
              a bool, numpy integer or one-element integer tensor is taken
              as its int), a name from class_names, or None.
    A sample with several named fields (format v2, like a WebDataset key):
    add(key, {"jpg": jpeg_bytes, "json": json_bytes}); each value is
    bytes-like as above, field names are str without '/' (stored in the
    dict's order; read back with Volume.read_fields / read_field). A "cls"
    field (b"3", as WebDataset's .cls members) also labels the sample, as
    `dlfs pack` does for tar shards; a label= given too must agree.

    write_batch(data, lengths, labels=None, names=None) adds many samples in
    one call (compact layout: millions per second): `data` their bytes back
    to back (bytes-like or a numpy array), `lengths` an integer array of
    their sizes, `labels` an integer array (-1 for none) and `names` a list
    of paths, or None for unnamed samples.

    Memory stays bounded whatever the data set's size: the bytes pass
    through an 8 MiB buffer. The compact layout keeps one block of 1,024
    samples in memory (names added out of order take 8 bytes per sample
    when close() sorts them); the tree layout about 40 bytes plus the path
    per sample until close().

    Errors (each naming the volume and the sample): ValueError for a bad
    path, a path already added (naming the sample added first) or a bad
    label; OSError subclasses for I/O (e.g. a full disk); TypeError for
    data that is not bytes-like. A refused sample leaves the writer usable.
    Not thread-safe: use one writer from one thread.
    """

    @_checked("dlfs.Writer")
    def __init__(self, path, class_names=None, targets=1, align=None, force=False,
                 progress=False, compress=None, dict=False, *, alignment=None, max_side=None,
                 resize_filter="bilinear", jpeg_quality=None, always_reencode=False,
                 image_format="keep", smart_threshold=256 * 256 * 3, jpeg_probability=0.5,
                 image_seed=0, image_color="rgb", prepare_threads=0, skip_unreadable=False,
                 layout="auto", tokens=None):
        if alignment is not None:
            if align is not None and align != alignment:
                raise ValueError(f"dlfs.Writer: align={align} and alignment={alignment} differ "
                                 "(alignment= is align='s earlier name)")
            align = alignment
        self.path = os.fspath(path)
        self.class_names = list(class_names) if class_names is not None else None
        self._class_ids = ({name: i for i, name in enumerate(self.class_names)}
                           if self.class_names is not None else {})
        images = {"max_side": max_side, "resize_filter": resize_filter,
                  "jpeg_quality": jpeg_quality, "always_reencode": bool(always_reencode),
                  "image_format": image_format, "smart_threshold": int(smart_threshold),
                  "jpeg_probability": float(jpeg_probability), "image_seed": int(image_seed),
                  "image_color": image_color, "prepare_threads": int(prepare_threads),
                  "skip_unreadable": bool(skip_unreadable)}
        self._token_dtype = None
        if tokens is not None:
            try:
                dtype = np.dtype(tokens)
            except TypeError:
                dtype = None
            if dtype is None or dtype.name not in ("uint16", "uint32"):
                raise ValueError(f"{self.path}: tokens={tokens!r}: token ids are \"uint16\" or "
                                 "\"uint32\"")
            self._token_dtype = dtype.newbyteorder("<")
        self._writer = _VolumeWriter(self.path, int(targets),
                                     1 if align is None else int(align), bool(force),
                                     self.class_names or [], compress or "", bool(dict), images,
                                     str(layout),
                                     0 if tokens is None else self._token_dtype.itemsize)
        self._progress = Progress(f"writing {self.path}") if progress else None

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc, tb):
        if exc_type is None:
            self.close()
        else:
            self.abort()
        return False

    def __len__(self):
        """Samples added so far."""
        return self._writer.samples

    @property
    def closed(self):
        return self._writer.closed

    @property
    def image_stats(self):
        """What image preparation did so far: images, changed, resized,
        skipped, skipped_examples."""
        return self._writer.image_stats

    @property
    def bytes_written(self):
        """Sample bytes added so far."""
        return self._writer.bytes

    def _label(self, path, label):
        if label is None:
            return -1
        if isinstance(label, str):
            if label not in self._class_ids:
                known = "no class_names given" if self.class_names is None else \
                    f"class_names are {self.class_names[:10]}"
                raise ValueError(f"{self.path}: sample {path!r}: unknown class {label!r} "
                                 f"({known})")
            return self._class_ids[label]
        # Anything an index can be made of, as torch takes targets: an int, a
        # bool (a binary label), a numpy integer or a one-element integer
        # tensor (torch.tensor(3)).
        try:
            value = operator.index(label)
        except TypeError:
            value = None
        if value is None and hasattr(label, "item") and getattr(label, "ndim", None) == 0:
            try:
                value = operator.index(label.item())
            except TypeError:
                value = None
        if value is None:
            raise TypeError(f"{self.path}: sample {path!r}: label must be an int, a class "
                            f"name or None, not {type(label).__name__} ({label!r})")
        if value < 0:
            raise ValueError(f"{self.path}: sample {path!r}: label {value} is negative")
        if self.class_names is not None and value >= len(self.class_names):
            raise ValueError(f"{self.path}: sample {path!r}: label {value} names no class: "
                             f"class_names has {len(self.class_names)} "
                             f"(labels 0..{len(self.class_names) - 1})")
        return value

    def _cls_label(self, path, fields, label):
        """The label of a sample given as fields: a "cls" field holds it as
        text ("3"), as WebDataset's .cls members do when tar shards are
        packed; an explicit label must agree with it."""
        if "cls" not in fields:
            return label
        raw = fields["cls"]
        try:
            text = bytes(memoryview(raw).cast("B")).decode("ascii").strip()
        except (TypeError, ValueError, UnicodeDecodeError):
            text = None
        if text is None or not text.isdigit():
            shown = bytes(memoryview(raw).cast("B"))[:40] if text is None else text[:40]
            raise ValueError(f"{self.path}: sample {path!r}: field 'cls' is not a class "
                             f"number: {shown!r}")
        value = int(text)
        if label is None:
            return value
        if self._label(path, label) != value:
            raise ValueError(f"{self.path}: sample {path!r}: label={label!r}, but its 'cls' "
                             f"field says {value}")
        return value

    def _buffer(self, path, data):
        if isinstance(data, (bytes, bytearray)):
            return data
        if isinstance(data, dict):  # fields (format v2): {"jpg": ..., "json": ...}
            fields = {}
            for name, value in data.items():
                if not isinstance(name, str):
                    raise TypeError(f"{self.path}: sample {path!r}: field names must be str, "
                                    f"not {type(name).__name__}")
                if isinstance(value, dict):
                    raise TypeError(f"{self.path}: sample {path!r}: field {name!r} is a dict")
                fields[name] = self._buffer(path, value)
            return fields
        if isinstance(data, str):
            raise TypeError(f"{self.path}: sample {path!r}: data is a str; pass bytes "
                            f"(e.g. data.encode())")
        try:
            view = memoryview(data)
        except TypeError:
            if not hasattr(data, "__array__"):  # e.g. a CPU torch tensor has it
                raise TypeError(f"{self.path}: sample {path!r}: data must be bytes-like or a "
                                f"numpy array, not {type(data).__name__}") from None
            data = np.asarray(data)
            view = memoryview(data)
        if not view.c_contiguous:  # e.g. a slice with a step: its bytes in C order
            data = np.ascontiguousarray(data)
        return data

    def add(self, path, data, label=None):
        """Adds sample `path` with the bytes of `data` (see help(dlfs.Writer))."""
        if not isinstance(path, str):
            raise TypeError(f"{self.path}: sample path must be a str, not {type(path).__name__}")
        buffer = self._buffer(path, data)
        if isinstance(buffer, dict):
            label = self._cls_label(path, buffer, label)
        self._writer.add(path, buffer, self._label(path, label))
        if self._progress is not None:
            self._progress.update_to(self._writer.samples, bytes=self._writer.bytes)

    @property
    def layout(self):
        """The directory layout being written: "compact", "tree", or "auto"
        until the first sample decides."""
        return self._writer.layout

    def _lengths(self, verb, lengths):
        """`lengths` as a contiguous uint64 array: 1-D, integers, none negative."""
        lengths = np.asarray(lengths)
        if lengths.ndim != 1 or not (lengths.size == 0 or
                                     np.issubdtype(lengths.dtype, np.integer)):
            raise TypeError(f"{self.path}: {verb}: lengths must be a 1-D integer array, "
                            f"not {lengths.dtype} of shape {lengths.shape}")
        if lengths.size and lengths.min() < 0:
            bad = int(np.flatnonzero(lengths < 0)[0])
            raise ValueError(f"{self.path}: {verb}: length {bad} is {lengths[bad]}")
        return np.ascontiguousarray(lengths, dtype=np.uint64)

    def write_batch(self, data, lengths, labels=None, names=None):
        """Adds len(lengths) samples: their bytes back to back in `data`,
        `lengths` their sizes, `labels` (-1 for none) and `names` (paths)
        optional; see help(dlfs.Writer)."""
        lengths = self._lengths("write_batch", lengths)
        buffer = self._buffer("<write_batch>", data)
        if isinstance(buffer, dict):
            raise TypeError(f"{self.path}: write_batch: data must be bytes-like, not a dict")
        if labels is not None:
            labels = np.asarray(labels)
            if labels.shape != lengths.shape or not (labels.size == 0 or
                                                     np.issubdtype(labels.dtype, np.integer)):
                raise TypeError(f"{self.path}: write_batch: labels must be an integer array of "
                                f"{lengths.size} (one per length), not {labels.dtype} of shape "
                                f"{labels.shape}")
            labels = np.ascontiguousarray(labels, dtype=np.int64)
            if labels.size:
                low, high = int(labels.min()), int(labels.max())
                if low < -1:
                    raise ValueError(f"{self.path}: write_batch: label {low} is negative "
                                     "(-1 means none)")
                if self.class_names is not None and high >= len(self.class_names):
                    raise ValueError(f"{self.path}: write_batch: label {high} names no class: "
                                     f"class_names has {len(self.class_names)}")
        if names is not None:
            names = list(names)
            if len(names) != lengths.size:
                raise ValueError(f"{self.path}: write_batch: {len(names)} names for "
                                 f"{lengths.size} samples")
        self._writer.add_batch(buffer, lengths, labels, names)
        if self._progress is not None:
            self._progress.update_to(self._writer.samples, bytes=self._writer.bytes)

    @property
    def token_dtype(self):
        """The token volume's dtype (numpy uint16 or uint32), or None."""
        return self._token_dtype

    def _tokens(self, what, tokens):
        """`tokens` as a contiguous little-endian array of the volume's
        dtype: any integer array whose values fit (ValueError naming the
        first that does not), converted without Python objects."""
        if self._token_dtype is None:
            raise ValueError(f"{self.path}: {what}: not a token volume "
                             "(dlfs.Writer(path, tokens=\"uint16\" or \"uint32\"))")
        a = np.asarray(tokens)
        if a.ndim == 1 and a.size == 0:  # [] is float64 to numpy
            return np.empty(0, dtype=self._token_dtype)
        if a.ndim != 1:
            raise TypeError(f"{self.path}: {what}: tokens must be a 1-D integer array, not of "
                            f"shape {a.shape}")
        if a.dtype.kind == "f":
            raise TypeError(f"{self.path}: {what}: {a.dtype} tokens are not token ids")
        if a.dtype.kind not in "iu":
            raise TypeError(f"{self.path}: {what}: tokens must be a 1-D integer array, not "
                            f"{a.dtype}")
        dtype = self._token_dtype
        if a.dtype == dtype:
            return np.ascontiguousarray(a)
        if a.size:
            high = np.iinfo(dtype).max
            low_value, high_value = a.min(), a.max()
            if low_value < 0 or high_value > high:
                bad = np.flatnonzero((a < 0) | (a > high))[0]
                raise ValueError(f"{self.path}: {what}: token {bad} is {a[bad]}, outside "
                                 f"{dtype.name} (0..{high})")
        return np.ascontiguousarray(a, dtype=dtype)

    def write_documents(self, tokens, lengths, labels=None):
        """Adds len(lengths) documents to a token volume: `tokens` a 1-D
        integer array of all their token ids back to back, `lengths` a 1-D
        integer array of each one's tokens (0 for an empty document),
        summing to len(tokens); `labels` optional (-1 for none). Values must
        fit the volume's dtype (ValueError naming the first that does not);
        the arrays are converted with numpy, never as Python lists."""
        data = self._tokens("write_documents", tokens)
        lengths = self._lengths("write_documents", lengths)
        total = int(lengths.sum(dtype=np.uint64)) if lengths.size else 0
        if total != data.size:
            raise ValueError(f"{self.path}: write_documents: the lengths sum to {total} tokens, "
                             f"not the {data.size} given")
        byte_lengths = lengths.astype(np.uint64) * np.uint64(data.itemsize)
        self.write_batch(data.view(np.uint8), byte_lengths, labels)

    def write_document(self, tokens, label=None):
        """Adds one document (a 1-D integer array of token ids, possibly
        empty) to a token volume; see write_documents."""
        data = self._tokens("write_document", tokens)
        labels = None if label is None else np.array([self._label("<document>", label)])
        self.write_batch(data.view(np.uint8), np.array([data.nbytes], dtype=np.uint64), labels)

    def close(self):
        """Writes the directory, syncs and publishes the volume at `path`.
        The writer is closed afterwards, whether or not this succeeds (on
        failure nothing is left behind)."""
        if self._writer.closed:
            return
        try:
            self._writer.close()
        finally:
            self._end_progress()

    def abort(self):
        """Drops everything written: no volume, no temporary files."""
        self._writer.abort()
        self._end_progress()

    def _end_progress(self):
        if self._progress is not None:
            self._progress.close()
            self._progress = None

    def __repr__(self):
        state = "closed" if self.closed else f"{len(self)} samples so far"
        return f"<dlfs.Writer {self.path!r}: {state}>"
