// Archives made and read without a dependency: a .tar.gz (ustar, gzip from
// node:zlib) and a .zip (entries stored, not compressed), to upload; the
// entries of a .tar.gz the server answers, to check; and a git repository
// on disk, to clone from.
import { execFile } from "node:child_process";
import { mkdir, writeFile } from "node:fs/promises";
import { dirname, join } from "node:path";
import { promisify } from "node:util";
import { gunzipSync, gzipSync } from "node:zlib";

const encoder = new TextEncoder();
const decoder = new TextDecoder();

/**
 * A .tar.gz of `entries`: `{ path: content }` for regular files (content a
 * string), or `{ path: { link: target } }` for a symbolic link.
 */
export function tarGz(entries) {
  const blocks = [];
  for (const [path, content] of Object.entries(entries)) {
    const link = typeof content === "object" ? content.link : undefined;
    const data = link === undefined ? encoder.encode(content) : new Uint8Array(0);
    blocks.push(tarHeader(path, data.length, link === undefined ? "0" : "2", link ?? ""));
    blocks.push(data, new Uint8Array((512 - (data.length % 512)) % 512));
  }
  blocks.push(new Uint8Array(1024));
  return new Uint8Array(gzipSync(concat(blocks)));
}

function tarHeader(path, size, type, link) {
  const header = new Uint8Array(512);
  const put = (offset, length, text) => header.set(encoder.encode(text).subarray(0, length), offset);
  put(0, 100, path);
  put(100, 8, type === "2" ? "0000777\0" : "0000644\0");
  put(108, 8, "0000000\0");
  put(116, 8, "0000000\0");
  put(124, 12, `${size.toString(8).padStart(11, "0")}\0`);
  put(136, 12, `${Math.floor(Date.now() / 1000).toString(8).padStart(11, "0")}\0`);
  put(148, 8, "        ");
  put(156, 1, type);
  put(157, 100, link);
  put(257, 6, "ustar\0");
  put(263, 2, "00");
  const sum = header.reduce((total, byte) => total + byte, 0);
  put(148, 8, `${sum.toString(8).padStart(6, "0")}\0 `);
  return header;
}

/** A .zip of `files` (`{ path: content }`), each entry stored as it is. */
export function zip(files) {
  const locals = [];
  const centrals = [];
  let offset = 0;
  for (const [path, content] of Object.entries(files)) {
    const name = encoder.encode(path);
    const data = encoder.encode(content);
    const crc = crc32(data);
    const local = new DataView(new ArrayBuffer(30));
    local.setUint32(0, 0x04034b50, true);
    local.setUint16(4, 20, true); // version needed
    local.setUint16(6, 0x0800, true); // UTF-8 names
    local.setUint16(8, 0, true); // stored
    local.setUint16(12, 0x21, true); // 1980-01-01
    local.setUint32(14, crc, true);
    local.setUint32(18, data.length, true);
    local.setUint32(22, data.length, true);
    local.setUint16(26, name.length, true);
    locals.push(new Uint8Array(local.buffer), name, data);
    const central = new DataView(new ArrayBuffer(46));
    central.setUint32(0, 0x02014b50, true);
    central.setUint16(4, (3 << 8) | 20, true); // made by Unix, 2.0
    central.setUint16(6, 20, true);
    central.setUint16(8, 0x0800, true);
    central.setUint16(10, 0, true);
    central.setUint16(14, 0x21, true);
    central.setUint32(16, crc, true);
    central.setUint32(20, data.length, true);
    central.setUint32(24, data.length, true);
    central.setUint16(28, name.length, true);
    central.setUint32(38, (0o100644 << 16) >>> 0, true); // a regular file, rw-r--r--
    central.setUint32(42, offset, true);
    centrals.push(new Uint8Array(central.buffer), name);
    offset += 30 + name.length + data.length;
  }
  const directory = concat(centrals);
  const end = new DataView(new ArrayBuffer(22));
  end.setUint32(0, 0x06054b50, true);
  end.setUint16(8, Object.keys(files).length, true);
  end.setUint16(10, Object.keys(files).length, true);
  end.setUint32(12, directory.length, true);
  end.setUint32(16, offset, true);
  return concat([...locals, directory, new Uint8Array(end.buffer)]);
}

/**
 * The entries of a .tar.gz: a Map of path (without a leading `./`, and
 * without the trailing `/` of a directory) to `{ type, content }` (`type`
 * the tar type flag; `content` a regular file's text).
 */
export function readTarGz(bytes) {
  const tar = gunzipSync(bytes);
  const entries = new Map();
  let longName = null;
  let paxPath = null;
  for (let at = 0; at + 512 <= tar.length; ) {
    const header = tar.subarray(at, at + 512);
    if (header.every((byte) => byte === 0)) break;
    const field = (offset, length) => {
      const raw = header.subarray(offset, offset + length);
      const end = raw.indexOf(0);
      return decoder.decode(end < 0 ? raw : raw.subarray(0, end));
    };
    const size = parseInt(field(124, 12).trim() || "0", 8);
    const type = field(156, 1) || "0";
    const data = tar.subarray(at + 512, at + 512 + size);
    at += 512 + Math.ceil(size / 512) * 512;
    if (type === "L") {
      longName = decoder.decode(data).replace(/\0+$/, "");
      continue;
    }
    if (type === "x") {
      const match = /(?:^|\n)\d+ path=([^\n]*)\n/.exec(decoder.decode(data));
      paxPath = match ? match[1] : null;
      continue;
    }
    if (type === "g") continue;
    const prefix = field(345, 155);
    let path = paxPath ?? longName ?? (prefix ? `${prefix}/${field(0, 100)}` : field(0, 100));
    longName = null;
    paxPath = null;
    path = path.replace(/^(\.\/)+/, "").replace(/\/+$/, "");
    if (path === "" || path === ".") continue;
    entries.set(path, { type, content: type === "0" ? decoder.decode(data) : undefined });
  }
  return entries;
}

/** Whether `bytes` start as gzip does. */
export function isGzip(bytes) {
  return bytes.length > 2 && bytes[0] === 0x1f && bytes[1] === 0x8b;
}

/**
 * Makes a git repository at `dir` with one commit of `files` per element of
 * `commits`, tagging each `v1`, `v2`, ... on branch `main`.
 */
export async function gitRepo(dir, commits) {
  const git = (...args) =>
    promisify(execFile)("git", ["-c", "user.name=Client Tests", "-c", "user.email=tests@example.com", ...args], {
      cwd: dir,
      env: { ...process.env, GIT_CONFIG_NOSYSTEM: "1", GIT_CONFIG_GLOBAL: "/dev/null" },
    });
  await mkdir(dir, { recursive: true });
  await git("init", "-q", "-b", "main");
  for (const [index, files] of commits.entries()) {
    for (const [path, content] of Object.entries(files)) {
      await mkdir(dirname(join(dir, path)), { recursive: true });
      await writeFile(join(dir, path), content);
    }
    await git("add", "-A");
    await git("commit", "-q", "-m", `commit ${index + 1}`);
    await git("tag", `v${index + 1}`);
  }
}

function concat(parts) {
  const whole = new Uint8Array(parts.reduce((total, part) => total + part.length, 0));
  let at = 0;
  for (const part of parts) {
    whole.set(part, at);
    at += part.length;
  }
  return whole;
}

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k += 1) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});

function crc32(bytes) {
  let crc = 0xffffffff;
  for (const byte of bytes) crc = CRC_TABLE[(crc ^ byte) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}
