// Checkpoints on a shared path: one shard file per PS task (one in all for
// the standalone trainer) and a manifest written after every shard is in
// place.  A checkpoint exists when its manifest does; every file is written
// to a temporary name, fsynced, renamed and its directory fsynced, so a
// crash leaves the previous checkpoint intact.
//
//   DIR/ckpt-<step>.shard-<p>-of-<P>   magic "PSTRCKPT", format version,
//                                      metadata length, JSON metadata
//                                      (the checkpoint's global step,
//                                      p and P, range, optimizer, update
//                                      count, data positions), the
//                                      shard's values, its optimizer state
//                                      (slot after slot), crc32 of all the
//                                      bytes before it (shard_file.hpp)
//   DIR/ckpt-<step>.tables-<p>-of-<P>  with embedding tables: magic
//                                      "PSTRTABL", version, JSON metadata
//                                      (kind full or incremental, chain),
//                                      rows, tombstones, crc32
//                                      (table_file.hpp)
//   DIR/ckpt-<step>.json               manifest: global step, model shape,
//                                      optimizer, data positions, every
//                                      shard with its range, bytes, crc32;
//                                      a crc32 of its own content
//                                      (manifest.hpp)
//
// <step> is zero-padded to 10 digits so that `ls` sorts by step.
//
// This header gathers the parts, each with its own header and test:
//   manifest.hpp    the manifest, the file names
//   shard_file.hpp  one shard file's bytes
//   table_file.hpp  one PS task's embedding tables (full or incremental)
//   table_chain.hpp which table file each PS task writes next, and its restore
//   store.hpp       the directory: prepare, list, wait for a file, prune
//   restore.hpp     the newest usable checkpoint and any range of it
//   inspect.hpp     `pstrain checkpoint inspect`
// (file_io.hpp, the atomic write, the framed file, the bounded read and
// the wait for another node's file under both file kinds, is theirs alone.)
#pragma once

#include "trainer/checkpoint/inspect.hpp"
#include "trainer/checkpoint/manifest.hpp"
#include "trainer/checkpoint/restore.hpp"
#include "trainer/checkpoint/shard_file.hpp"
#include "trainer/checkpoint/store.hpp"
#include "trainer/checkpoint/table_chain.hpp"
#include "trainer/checkpoint/table_file.hpp"
