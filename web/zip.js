// A tiny writer of stored (uncompressed) zip archives: enough for a folder of text files.
const CRC_TABLE = (() => {
  const table = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
    table[n] = c >>> 0;
  }
  return table;
})();

function crc32(bytes) {
  let crc = 0xffffffff;
  for (const byte of bytes) crc = CRC_TABLE[(crc ^ byte) & 0xff] ^ (crc >>> 8);
  return (crc ^ 0xffffffff) >>> 0;
}

function header(size, fields) {
  const view = new DataView(new ArrayBuffer(size));
  let offset = 0;
  for (const [bytes, value] of fields) {
    if (bytes === 4) view.setUint32(offset, value, true);
    else view.setUint16(offset, value, true);
    offset += bytes;
  }
  return new Uint8Array(view.buffer);
}

// files: [{name, text} or {name, bytes}] -> a Blob holding a zip archive (method 0: stored, UTF-8 names).
export function makeZip(files) {
  const encoder = new TextEncoder();
  const parts = [];
  const central = [];
  let offset = 0;
  for (const file of files) {
    const name = encoder.encode(file.name);
    const data = file.bytes || encoder.encode(file.text);
    const crc = crc32(data);
    const common = [[2, 20], [2, 0x0800], [2, 0], [2, 0], [2, 0x21], [4, crc],
      [4, data.length], [4, data.length], [2, name.length], [2, 0]];
    parts.push(header(30, [[4, 0x04034b50], ...common]), name, data);
    central.push(header(46, [[4, 0x02014b50], [2, 20], ...common, [2, 0], [2, 0], [2, 0],
      [4, 0], [4, offset]]), name);
    offset += 30 + name.length + data.length;
  }
  const size = central.reduce((total, part) => total + part.length, 0);
  const end = header(22, [[4, 0x06054b50], [2, 0], [2, 0], [2, files.length],
    [2, files.length], [4, size], [4, offset], [2, 0]]);
  return new Blob([...parts, ...central, end], { type: 'application/zip' });
}
