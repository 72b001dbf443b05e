// kernelgen's service worker (served from the site root so it covers the whole page): every
// same-origin GET is answered from the network when it can be and from the cache when it cannot,
// so the page, Pyodide and the wheels work offline after the first visit.
const CACHE = 'kernelgen-v1';
const SHELL = ['./', 'index.html', 'web/app.js', 'web/app_state.js', 'web/app_editor.js',
  'web/app_status.js', 'web/app_actions.js', 'web/app_stop.js', 'web/style.css', 'web/kernelgen.js',
  'web/worker.js', 'web/gpu.js', 'web/gpu_device.js', 'web/gpu_batches.js', 'web/gpu_buffers.js',
  'web/gpu_pipelines.js', 'web/gpu_bindings.js', 'web/store.js', 'web/views.js', 'web/examples.js',
  'web/zip.js', 'web/downloads.js', 'web/models.js', 'web/pictures.js', 'web/editors.js',
  'web/ace-modes.js', 'web/vendor/ace/ace.js', 'web/favicon.svg'];

self.addEventListener('install', (event) => {
  event.waitUntil(caches.open(CACHE).then((cache) => cache.addAll(SHELL))
    .then(() => self.skipWaiting()));
});

self.addEventListener('activate', (event) => {
  event.waitUntil(self.clients.claim());
});

async function networkThenCache(request) {
  const cache = await caches.open(CACHE);
  try {
    const response = await fetch(request);
    if (response.ok && response.status === 200) await cache.put(request, response.clone());
    return response;
  } catch (error) {
    const cached = await cache.match(request, { ignoreSearch: true });
    if (cached) return cached;
    throw error;
  }
}

self.addEventListener('fetch', (event) => {
  const url = new URL(event.request.url);
  if (event.request.method !== 'GET' || url.origin !== self.location.origin) return;
  event.respondWith(networkThenCache(event.request));
});
