// The page benchmarks' device setup, shared by lm_page.js and pypi_page.js (ES modules).

// The compute limits a benchmark asks of the adapter: all it has, so bundles and peers share
// one device that fits the largest kernel.
const COMPUTE_LIMITS = ['maxComputeInvocationsPerWorkgroup', 'maxComputeWorkgroupSizeX',
  'maxComputeWorkgroupSizeY', 'maxComputeWorkgroupSizeZ', 'maxStorageBuffersPerShaderStage',
  'maxStorageBufferBindingSize', 'maxBufferSize', 'maxComputeWorkgroupStorageSize',
  'maxComputeWorkgroupsPerDimension'];

/** The adapter's description, vendor and architecture as one line (null without info). */
export function describe(info) {
  return info ? [info.description, info.vendor, info.architecture].filter(Boolean).join(' / ')
    : null;
}

/** {limit: the adapter's value} for every compute limit above, for requestDevice. */
export function largestLimits(adapter) {
  const limits = {};
  for (const key of COMPUTE_LIMITS) limits[key] = adapter.limits[key];
  return limits;
}
