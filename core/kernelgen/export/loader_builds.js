// A symbolic kernel's variants (export/loader.js's part, joined into model.js by
// export/scripts.py): which launch a step takes at the dims' values (pick), and when a variant
// not built yet is built in the background (ski rental, below: charge, measure, rate,
// startBuilds). VariantBuilds is Model's base class: its methods use the fields Model's
// constructor sets (builds, asking, rates, busy, ...) and Model's usable().

import { gridDispatch } from './loader_common.js';
import { pipeline } from './loader_device.js';

// Whether variant `v` (its dim, most, exact) serves the dims' `values`: the dim bound to at most
// `most`, and exactly `most` where the variant is pinned to that value (`exact`: its stores are
// gated by dim == most, so at another value it writes nothing): uop/program.py `serves`.
const serves = (v, values) => values[v.dim] <= v.most && (!v.exact || values[v.dim] === v.most);

// When a variant not built yet is built (ski rental; the same rule as the page's runtime,
// runtime/webgpu_browser.py DEFAULT_MS_PER_BYTE): until it is built, the kernel runs its values
// (renting); once the time its runs took reaches the variant's build cost, it is built (buying).
// - cost: the variant's WGSL bytes x the build rate (buildRate): the time the background builds
//   so far added to the runs they overlapped, per source byte: each run during a build against
//   the time per work (workOf) of the last run of its like (the same pipelines and outputs) with
//   no build under way. That is what a build costs the runs, not its own wall time: a driver
//   that compiles on another thread builds beside the runs, one that compiles on the runs'
//   thread holds them up (measure). Before any background build was measured: the wall time
//   this model was busy building pipelines per source byte (load()'s: msPerByte), or
//   DEFAULT_MS_PER_BYTE;
// - lost: at each read, the run's wall time is shared out among its kernels by their estimated
//   work at the bound values (the manifest's `work`: multiply-adds or outputs, times the padding
//   their grid launches there: whole tiles at small values; workOf) under the launch that runs: a
//   built variant's own grid, so a variant built for small values counts its own work, not its
//   kernel's padding, and does not absorb the charge of the unbuilt variants beside it (issue 37).
//   A built variant's work counts at its measured rate (time per work, the kernels' being 1:
//   rate): at the first read no build overlapped that takes it where the last such read of the
//   same shape took its kernel, its runs took what the kernel's did then less the time saved (a
//   variant of the same work at a value, without padding to save, runs ~10x faster on lavapipe:
//   counted at its work it kept the charge of the unbuilt ones beside it). Each variant asked for
//   is charged the share of the kernels that ran in its place: their own time, the most it could
//   save (an upper bound; a run of one kernel charges its whole time). Charged the run's whole
//   time each, the variants of every layer's matmuls that one 128-token prefill asks for were all
//   bought in its first rounds, and their builds slowed SwiftShader's decode (5.0 tok/s, 8.6 once
//   settled); shared out equally, the prefill's were never bought (issue 37). So the charges of
//   one run add up to at most its time, and a variant whose kernels are most of a run is bought
//   first;
// - at a read, a variant charged its cost or more is queued (one up to its dim's top at the first
//   read that asks for it: a one-off kernel's own capped tile, whose kernel is the cheapest to
//   build for the first result, lowering/cheap_first.py); the builds start after a
//   read, one at a time, the shortest first (startBuilds). So a build costs at most the time
//   already lost (at most twice the best choice made knowing the future), and a value asked
//   once for a short run builds nothing.
// Measured (bench/lm_page.py smollm2-135m q4, 2 layers, 128-token prompt, 32 tokens, 6 rounds,
// A/B against the whole-run rule in turn, wall ms, loaded machine): SwiftShader decode 6.9-14.5 s
// per 31 tokens against 12.9-19.3, prefill 1.1-1.6 s against 1.7-3.7 (load 4-8); lavapipe
// decode alike (2.0-3.0 s against 1.7-2.6) but its prefill's 7 variants (365-396 KB each, 7-23 %
// of the prefill's work each) not bought in 7 prompts: 0.6-1.1 s against 0.18-0.23 once the
// whole-run rule bought them (load 3-5): open, issue 37 asks them bought in 1-3 prompts.
// Priced at what the builds cost the runs (measure) instead of their wall time, the same bench
// A/B against main's whole-run rule in turn: the background builds held SwiftShader's runs up about
// as long as they took (0.059 ms per byte measured against 0.066 wall, load 18), lavapipe's less
// (0.015 against 0.027 at load 18, 0.006 against 0.025 at load 12): lavapipe's decode variants
// bought in 1-3 prompts, its prefill's biggest two (each charged ~0.2 s a prompt at 2 s) due
// about the 7th prompt, the others later: their shares of the prefill's work undercount their
// time (the LM head's variant, built, keeps ~75 % of the work), so lavapipe's prefill stays at
// 2.9-5.4 s against main's 1.5-2.1 from its 3rd prompt (load 10-12): open. SwiftShader: prefill
// 5.6-11.9 s, decode 1.1-2.3 tok/s against main's 12-28 s and 0.7-1.0 (load 18-22).
// Logged in lavapipe's 128-token prefill (--last-logits: its LM head is static, so main's shares
// are the same there): the 7 variants asked for hold 89 % of the work, 22 % each the two
// 1536-wide, bought by the 3rd prompt; built, they counted 44 % of the work while running
// faster: measured, their rate came out 0.28-0.34 (load 11), so the others' shares rise. Whether
// the prefill's variants are bought in 1-3 prompts still turns on the build rate measured first:
// 0.001 ms per byte (all 7 bought at the first prompt; prefill 0.5-0.6 s from the 4th, load 11)
// or 0.006-0.011 (the two by the 3rd, the rest later); A/B runs against main (load 10-16) fall
// within that spread either way.
// Before (a flat 2 asks per multiple of the kernel's source length), bench/lm_page.py's q4
// 128-token prefill on lavapipe ran 369 tokens/s for 20 prompts where its variants run 927.
// 20 ms per KB: SwiftShader's ~300 KB (9,000-line) 128-row matmul variants take 4-10 s
const DEFAULT_MS_PER_BYTE = 0.02;
// The least share of its steps' time a built variant is measured to take (rate)
const RATE_FLOOR = 0.02;
// A step's estimated work at the dims' `values`: its manifest `work` factors ([terms, const],
// each const + sum(c * dim)) multiplied, times the padding its run-time grid launches there
// (the workgroups' share of the grid over what the values need: whole tiles of padding at small
// values, what its variants save); where it has none, or a dim is not bound, the threads it
// launches there (uop/program.py launch_work)
function workOf(step, values) {
  const affine = ([terms, c]) => terms.reduce((sum, [name, k]) => sum + k * values[name], c);
  const bound = (terms) => terms.every(([name]) => name in values);
  const launched = gridDispatch(step.dispatch, step.grid, values);
  if (step.work?.length && step.work.every(([terms]) => bound(terms))) {
    const work = step.work.reduce((acc, f) => acc * Math.max(1, affine(f)), 1);
    const [terms, c, per] = step.grid?.[0] || [[], 0, 0];
    const need = affine([terms, c]);
    return step.grid?.length && bound(terms)
      ? work * Math.max(1, launched[0] * per / Math.max(need, 1)) : work;
  }
  return launched[0] * launched[1] * launched[2] * step.threads;
}

// The variants' builds and picks of Model (its base class)
export class VariantBuilds {

  // The pipeline of launch `key` (its build started once; later calls share it), timed into
  // this.busy. A failed build rejects, and its error is kept for run() to throw.
  build(key) {
    const entry = this.builds.get(key);
    if (entry.building) return entry.building;
    const busy = this.busy;
    if (busy.open++ === 0) busy.since = performance.now();
    const done = () => {
      busy.bytes += entry.source.length;
      if (--busy.open === 0) busy.ms += performance.now() - busy.since;
    };
    const making = pipeline(this.device, entry.launch, entry.source, entry.layout);
    entry.building = making.then((made) => {
      done();
      entry.made = made;
      return made;
    }, (error) => {
      done();
      this.failed ||= error;
      throw error;
    });
    return entry.building;
  }

  // The build rate: the wall time this model was busy building pipelines per source byte built
  // (DEFAULT_MS_PER_BYTE before any was timed).
  msPerByte() {
    return this.busy.ms > 0 && this.busy.bytes > 0 ? this.busy.ms / this.busy.bytes
      : DEFAULT_MS_PER_BYTE;
  }

  // The rate (ms per source byte) a variant's build cost is priced at: the time the background
  // builds measured so far added to the runs they overlapped, per byte (DEFAULT_MS_PER_BYTE's
  // comment; none or less: 0), or msPerByte before any was.
  buildRate() {
    const { ms, bytes } = this.foreground;
    return bytes > 0 ? Math.max(0, ms) / bytes : this.msPerByte();
  }

  // At a read: a run of `ms` and estimated work `work` (workOf) that no background build
  // overlapped is the base of its like `sig` (the pipelines it took and its outputs), else its
  // time over the base's ms per work is shared out among the builds that did (one of them is not
  // measured where its like has no base); a build done is added to this.foreground.
  measure(ms, sig, work) {
    const base = this.clean.get(sig);
    if (!this.overlapped.size) {
      if (this.clean.size > 4096) this.clean.clear();
      this.clean.set(sig, ms / Math.max(work, 1e-30));
    }
    for (const key of this.overlapped) {
      const build = this.during.get(key);
      if (base === undefined) build.known = false;
      else build.excess += (ms - base * work) / this.overlapped.size;
    }
    for (const [key, build] of this.during) {
      if (!build.done) continue;
      this.during.delete(key);
      if (!build.known) continue;
      this.foreground.ms += build.excess;  // signed: a run's noise either way evens out
      this.foreground.bytes += build.bytes;
    }
  }

  // What a step runs at the dims' `values`: the first variant that serves them (serves), where it
  // is built, else the first built one that serves them, else the kernel itself (built at
  // load; it serves every value). A variant not built is never dispatched: asked for, it is
  // charged its kernels' share of the run's wall time at the read (charge) and joins the
  // background builds (startBuilds) once that reaches its build cost.
  pick(step, values) {
    const fits = step.variants.filter((v) => serves(v, values));
    // (a variant up to the top, a capped tile, serves smaller values only where it is theirs:
    // below, until their own is built, the kernel, the cheaper tile, pads fewer rows)
    const built = fits.find((v, i) => this.builds.get(v.key).made &&
      (i === 0 || !this.builds.get(v.key).top));
    const { dispatch, grid, key } = built || step;
    const work = workOf(built || step, values);   // under the launch that runs (charge)
    const time = work * (this.rates.get(key) ?? 1);   // a variant's measured rate (rate)
    this.work += work;
    this.time += time;
    this.ran.push([key, work, time]);
    if (fits.length && fits[0] !== built && !this.builds.get(fits[0].key).building) {
      this.asking.set(fits[0].key, (this.asking.get(fits[0].key) || 0) + time);  // layers add
    }
    this.picked.push(step.variants.indexOf(built));   // the run's like (measure): -1 the kernel
    return { pipeline: this.builds.get(key).made.pipeline, dispatch, grid };
  }

  // At a read: charges each variant the run asked for its kernels' share of the run's wall time
  // `ms` (their work over the run's) and queues those whose charges reach their build cost (ski
  // rental: DEFAULT_MS_PER_BYTE's comment).
  charge(ms, sig = '', shape = '') {
    this.measure(ms, sig, this.work);
    if (!this.overlapped.size) this.rate(ms, shape);
    const rate = this.buildRate();
    for (const [key, time] of this.asking) {
      const wanted = this.builds.get(key);
      wanted.lost += ms * time / Math.max(this.time, time, 1e-30);
      if (!wanted.building && (wanted.top || wanted.lost >= rate * wanted.source.length)) {
        this.queued.add(key);
      }
    }
    this.asking.clear();
    this.work = 0;
    this.time = 0;
    this.ran = [];
  }

  // At a read of a run no build overlapped (ms long): where the last such run of its `shape`
  // (outputs, dims' values) that took other launches took them at some steps, each now a built
  // variant, those variants get the rate (time per work, the kernels' being 1) that makes their
  // steps' time what the same steps took then less what this run saved: the time a built variant
  // takes, measured (at least RATE_FLOOR of what its steps took, at most all of it), again at each
  // such run (the first after a build may pay the driver's first-use compile).
  rate(ms, shape) {
    const last = this.last.get(shape);
    const same = last?.ran.length === this.ran.length &&
      last.ran.every((r, i) => r[0] === this.ran[i][0]);
    const before = same ? last.before : last && { ms: last.ms, ran: last.ran };
    if (this.last.size > 4096) this.last.clear();
    this.last.set(shape, { ms, ran: this.ran, before });
    if (!before || before.ran.length !== this.ran.length) return;
    const moved = this.ran.map((_, i) => i).filter((i) => this.ran[i][0] !== before.ran[i][0]);
    const variant = (key) => this.builds.get(key).launch.most !== undefined;
    if (!moved.length || !moved.every((i) => variant(this.ran[i][0]))) return;
    const total = before.ran.reduce((sum, r) => sum + r[2], 0);
    const then = moved.reduce((sum, i) => sum + before.ran[i][2], 0);   // in time units
    const took = then * before.ms / Math.max(total, 1e-30);             // ms, then
    const now = Math.min(took, Math.max(RATE_FLOOR * took, took - (before.ms - ms)));
    for (const i of moved) {
      this.rates.set(this.ran[i][0], (now / Math.max(took, 1e-30)) * before.ran[i][2] /
        Math.max(this.ran[i][1], 1e-30));
    }
  }

  // Builds the queued variants one at a time, the shortest source first, after a run's outputs
  // are read (so they do not hold up that result, and one at a time they leave the CPU adapters'
  // cores to the runs).
  startBuilds() {
    if (this.background || !this.queued.size || this.destroyed) return;
    const size = (key) => this.builds.get(key).source.length;
    const key = [...this.queued].reduce((a, b) => (size(b) < size(a) ? b : a));
    this.queued.delete(key);
    const measured = { excess: 0, known: true, done: false, bytes: size(key) };
    this.during.set(key, measured);
    this.overlapped.add(key);
    this.backgroundKey = key;
    this.background = this.build(key).catch(() => {}).finally(() => {
      measured.done = true;
      this.background = null;
      this.backgroundKey = null;
      this.startBuilds();
    });
  }

  // Builds every variant not built yet (all in flight together); resolves when they are, so the
  // runs after it take each value's own variant. onProgress({done, total}) as in load().
  async buildVariants({ onProgress = null } = {}) {
    this.usable();
    const left = [...this.builds].filter(([, e]) => !e.made).map(([key]) => key);
    let done = 0;
    onProgress?.({ done, total: left.length });
    await Promise.all(left.map(async (key) => {
      this.queued.delete(key);
      await this.build(key);
      done += 1;
      onProgress?.({ done, total: left.length });
    }));
  }

  // {built, total}: the distinct pipelines made so far and the bundle's (kernels and variants)
  get pipelines() {
    const all = [...this.builds.values()];
    return { built: all.filter((e) => e.made).length, total: all.length };
  }
}
