#!/usr/bin/env python3
"""Which NCCL functions a program or library needs that a libnccl.so.2 lacks.

    nccl_needs.py NEEDER LIBNCCL

NEEDER is what links NCCL (PyTorch's libtorch_cuda.so, nccl-tests'
binaries); LIBNCCL is the library that would serve it (hoop's
lib/hoop/libnccl.so.2).  Prints how many nccl* functions NEEDER references
and each that LIBNCCL does not define; exits 1 if any is missing, since the
loader then stops the program before main.  Reads the ELF dynamic symbol
tables itself: the GPU machine has no binutils.
"""

import struct
import sys

SHT_DYNSYM = 11
SHN_UNDEF = 0


def dynamic_symbols(path):
    """(name, defined) for each symbol of a 64-bit little-endian ELF's .dynsym."""
    with open(path, "rb") as f:
        data = f.read()
    if data[:4] != b"\x7fELF" or data[4] != 2 or data[5] != 1:
        sys.exit(f"nccl_needs: {path} is not a 64-bit little-endian ELF file")
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum = struct.unpack_from("<HH", data, 0x3A)
    sections = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
                for i in range(shnum)]
    for _, sh_type, _, _, offset, size, link, _, _, entsize in sections:
        if sh_type != SHT_DYNSYM:
            continue
        strtab_offset = sections[link][4]
        for at in range(offset, offset + size, entsize):
            st_name, _, _, st_shndx = struct.unpack_from("<IBBH", data, at)
            end = data.index(b"\0", strtab_offset + st_name)
            name = data[strtab_offset + st_name:end].decode()
            yield name.split("@")[0], st_shndx != SHN_UNDEF
    return


def main():
    if len(sys.argv) != 3:
        sys.exit(__doc__)
    needer, lib = sys.argv[1:]
    needed = sorted({n for n, defined in dynamic_symbols(needer)
                     if not defined and n.startswith("nccl")})
    defined = {n for n, d in dynamic_symbols(lib) if d}
    missing = [n for n in needed if n not in defined]
    print(f"{needer} references {len(needed)} nccl functions; "
          f"{lib} lacks {len(missing)}" + (":" if missing else ""))
    for n in missing:
        print(f"  {n}")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
