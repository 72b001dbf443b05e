// The browser's store of compiled kernels (IndexedDB), kept across page loads: the worker reads
// it into Python at boot (web_api.load_stored) and writes what each command compiled
// (web_api.take_stored); records are keyed by kernelgen's build (its version and source) and the
// kernel's compile key, and sealed with a checksum that Python checks before using one
// (core/kernelgen/stored.py), so a reloaded page that runs the same program compiles nothing.
// The worker also keeps here, unsealed, the order the page's first run launched its pipelines in
// (worker.js saveLaunchOrder: 'launch-order'), which the next boot prebuilds them in.

const DB = 'kernelgen-kernels';
const STORE = 'kernels';

function request(req) {
  return new Promise((resolve, reject) => {
    req.onsuccess = () => resolve(req.result);
    req.onerror = () => reject(req.error);
  });
}

let opened = null;

function open() {
  if (!opened) {
    const req = indexedDB.open(DB, 1);
    req.onupgradeneeded = () => req.result.createObjectStore(STORE);
    opened = request(req);
    opened.catch(() => { opened = null; });
  }
  return opened;
}

// {key: record} of every stored kernel ({} where IndexedDB is not available).
export async function readStored() {
  if (typeof indexedDB === 'undefined') return {};
  const db = await open();
  const store = db.transaction(STORE, 'readonly').objectStore(STORE);
  const [keys, values] = await Promise.all([request(store.getAllKeys()),
    request(store.getAll())]);
  return Object.fromEntries(keys.map((k, i) => [k, values[i]]));
}

// Write {cleared, records}: empty the store first when `cleared`, then add the records.
export async function writeStored({ cleared, records }) {
  if (typeof indexedDB === 'undefined') return;
  const entries = Object.entries(records);
  if (!cleared && !entries.length) return;
  const db = await open();
  const tx = db.transaction(STORE, 'readwrite');
  const store = tx.objectStore(STORE);
  if (cleared) store.clear();
  const at = Date.now();   // when written (shown to someone reading the store)
  for (const [key, record] of entries) store.put({ ...record, at }, key);
  await new Promise((resolve, reject) => {
    tx.oncomplete = resolve;
    tx.onerror = () => reject(tx.error);
    tx.onabort = () => reject(tx.error);
  });
}
