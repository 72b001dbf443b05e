// Syntax highlighting of WGSL and PTX for the Ace editor (Ace ships neither mode): token rules
// as data, one regular expression per token class.
// IDENTIFIER: a name is matched whole (so that no keyword or number is found inside it) but is
// plain 'text', like the spaces and punctuation around it: Ace renders a run of text tokens as
// one text node, where an 'identifier' token (which the theme does not color) cost a span each.
const WGSL_RULES = [
  { token: 'comment', regex: '//.*$' },
  { token: 'keyword', regex: '\\b(?:fn|let|var|const|if|else|for|loop|while|break|continue|return|' +
    'struct|enable|override|switch|case|default|alias)\\b' },
  { token: 'storage.type', regex: '\\b(?:f16|f32|i32|u32|bool|vec[234]|mat\\dx\\d|array|atomic|' +
    'ptr|storage|uniform|workgroup|function|private|read|read_write)\\b' },
  { token: 'support.function', regex: '@\\w+|\\b(?:workgroupBarrier|storageBarrier|atomic\\w+|' +
    'select|bitcast|pack2x16float|unpack2x16float|exp2|log2|sqrt|inverseSqrt|sin|cos|min|max|' +
    'abs|floor|ceil|fma|clamp)\\b' },
  { token: 'constant.numeric', regex: '\\b(?:0x[0-9a-fA-F]+|\\d+\\.?\\d*(?:e[+-]?\\d+)?)[fhiu]?\\b' },
  { token: 'text', regex: '[A-Za-z_]\\w*' },  // names: plain text (see IDENTIFIER)
];

const PTX_RULES = [
  { token: 'comment', regex: '//.*$' },
  { token: 'keyword', regex: '\\.(?:version|target|address_size|visible|entry|func|param|reg|' +
    'shared|global|local|const|align|maxntid|reqntid)\\b' },
  { token: 'variable.language', regex: '%[A-Za-z_][\\w.]*' },
  { token: 'support.function', regex: '^\\s*(?:@!?%\\w+\\s+)?[a-z][a-z0-9]*(?:\\.[a-z0-9]+)*' },
  { token: 'entity.name.tag', regex: '^[A-Za-z_$][\\w$]*:' },
  { token: 'constant.numeric', regex: '\\b(?:0[fFdD][0-9a-fA-F]+|0x[0-9a-fA-F]+|\\d+)\\b' },
  { token: 'text', regex: '[A-Za-z_$][\\w$]*' },  // names: plain text (see IDENTIFIER)
];

function defineMode(ace, name, rules) {
  ace.define(`ace/mode/${name}`, ['require', 'exports', 'ace/lib/oop', 'ace/mode/text',
    'ace/mode/text_highlight_rules'], (require, exports) => {
    const oop = require('ace/lib/oop');
    const { Mode: TextMode } = require('ace/mode/text');
    const { TextHighlightRules } = require('ace/mode/text_highlight_rules');
    function Rules() {
      this.$rules = { start: rules };
    }
    oop.inherits(Rules, TextHighlightRules);
    function Mode() {
      this.HighlightRules = Rules;
    }
    oop.inherits(Mode, TextMode);
    exports.Mode = Mode;
  });
}

export function defineKernelModes(ace) {
  defineMode(ace, 'wgsl', WGSL_RULES);
  defineMode(ace, 'ptx', PTX_RULES);
}
