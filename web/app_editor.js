// The page's editors (app.js lists the page's modules): the program's editor and the WGSL and
// PTX views, the examples menu, and an error shown next to the code (its line marked).

import { EXAMPLES, DEFAULT_EXAMPLE } from './examples.js';
import { makeEditor, setupAce } from './editors.js';
import { showError } from './views.js';
import { $, state } from './app_state.js';

const STORAGE_KEY = 'kernelgen.program';

export function setupEditors() {
  setupAce();
  state.editor = makeEditor('editor', 'python', false);
  state.wgsl = makeEditor('wgsl', 'wgsl', true);
  state.ptx = makeEditor('ptx', 'ptx', true);
  state.editor.setValue(localStorage.getItem(STORAGE_KEY) ?? EXAMPLES[DEFAULT_EXAMPLE], 1);
  state.editor.session.on('change', () => {
    localStorage.setItem(STORAGE_KEY, state.editor.getValue());
    clearError();
  });
}

export function setupExamples() {
  const select = $('example');
  select.append(new Option('examples…', ''));
  for (const name of Object.keys(EXAMPLES)) select.append(new Option(name, name));
  select.onchange = () => {
    if (select.value) loadExample(select.value);
    select.value = '';
  };
}

export function loadExample(name) {
  state.editor.setValue(EXAMPLES[name], 1);
  state.editor.focus();
}

export function clearError() {
  $('error').hidden = true;
  state.editor.session.clearAnnotations();
  if (state.marker !== null) state.editor.session.removeMarker(state.marker);
  state.marker = null;
}

function goToLine(line) {
  state.editor.gotoLine(line, 0, true);
  state.editor.focus();
}

export function reportError(error) {
  clearError();
  showError($('error'), error, goToLine);
  if (error.line) {
    const row = error.line - 1;
    state.editor.session.setAnnotations([{ row, column: 0, text: error.message, type: 'error' }]);
    const range = new (ace.require('ace/range').Range)(row, 0, row, 1);
    state.marker = state.editor.session.addMarker(range, 'ace-error-line', 'fullLine');
    state.editor.scrollToLine(row, true, true);
  }
  if (error.source_line && error.type === 'CompileError') {
    state.wgsl.gotoLine(error.source_line, 0, false);
  }
  document.body.dataset.last = 'error';
}
