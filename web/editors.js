// The page's Ace editors: the Python editor and the read-only WGSL/PTX source views, set up so
// that a run renders each view once (the page's memory holds every render's DOM until the next
// garbage collection).
import { defineKernelModes } from './ace-modes.js';

// Ace (loaded by index.html as a global) with its files in web/vendor/ace/ and our WGSL/PTX modes.
export function setupAce() {
  ace.config.set('basePath', new URL('vendor/ace/', import.meta.url).href);
  defineKernelModes(ace);
}

// A read-only source view keeps its size whatever text it shows (its scrollbars always there, a
// gutter at least three digits wide): the "compiling…" line, then a long PTX, would otherwise
// resize it twice per run, and each resize lays the whole view out again (garbage for the GC).
const STEADY_GUTTER = {
  getWidth: (session, lastLine, config) => Math.max(3, String(lastLine).length) *
    config.characterWidth,
  getText: (session, row) => row + session.$firstLineNumber,
};

export function makeEditor(id, mode, readOnly) {
  const editor = ace.edit(id, {
    mode: `ace/mode/${mode}`, theme: 'ace/theme/one_dark', readOnly, showPrintMargin: false,
    fontSize: '13px', tabSize: 4, useSoftTabs: true, highlightActiveLine: !readOnly,
    vScrollBarAlwaysVisible: readOnly, hScrollBarAlwaysVisible: readOnly,
  });
  editor.renderer.setScrollMargin(6, 6);
  if (readOnly) {
    editor.session.gutterRenderer = STEADY_GUTTER;
    // A view needs no background tokenizer (Ace's) either: the WGSL/PTX modes keep no state from
    // line to line, so the lines a view shows are tokenized as it renders them, and the
    // tokenizer's pass after each new text would render those lines a second time (twice the
    // DOM garbage per run).
    editor.session.bgTokenizer.scheduleStart = () => {};
  }
  return editor;
}

// A read-only source view's text; unchanged text is not set again (Ace would render the whole
// view anew, and the page's memory holds each render's DOM until the next garbage collection).
// A view has nothing to undo: its undo history (every text it showed) is dropped.
export function setSource(editor, text) {
  if (editor.getValue() === text) return;
  editor.setValue(text, -1);
  editor.session.getUndoManager().reset();
}

// Highlight longer than this many characters is skipped (plain text): a span per token.
const HIGHLIGHT_MAX = 400_000;

// `text` in a <pre>, coloured as the source views colour it (the same Ace mode tokenizes each
// line, the same theme colours the tokens); its text content stays `text`. The Models view's
// WGSL and PTX panes.
export function highlightInto(pre, text, mode) {
  const Mode = text.length <= HIGHLIGHT_MAX ? ace.require(`ace/mode/${mode}`)?.Mode : null;
  if (!Mode) {
    pre.textContent = text;
    return;
  }
  pre.classList.add('ace-one-dark', 'highlighted');
  const tokenizer = new Mode().getTokenizer();
  const out = document.createDocumentFragment();
  let lineState = 'start';
  text.split('\n').forEach((line, row) => {
    if (row) out.append('\n');
    const { tokens, state: next } = tokenizer.getLineTokens(line, lineState);
    lineState = next;
    for (const { type, value } of tokens) {
      if (type === 'text') out.append(value);
      else out.append(Object.assign(document.createElement('span'), { textContent: value,
        className: type.split('.').map((part) => `ace_${part}`).join(' ') }));
    }
  });
  pre.replaceChildren(out);
}
