import {
  isAlias,
  isMap,
  isPair,
  isScalar,
  isSeq,
  LineCounter,
  parseDocument,
  Scalar,
  type Document,
  type Node,
  type Pair,
  type ParsedNode,
  type ScalarTag,
  type Tags,
} from 'yaml';
import { MAX_CONFIG_BYTES, tooLarge } from './config-file';
import { ConfigError } from './errors';
import { formatFieldPath, type FieldPath } from './field-path';

/**
 * A config file parsed with the position of every node kept, so a refusal can point at
 * `file:line:col`.
 *
 * The YAML dialect is the one dstack reads configs with (PyYAML's `safe_load`, YAML 1.1): `on`/`off`
 * and `yes`/`no` are booleans, but not `y`/`n`, and `1e3` is a string. Unlike dstack, duplicate
 * keys are refused (PyYAML keeps the last one silently) and aliases may not expand without bound.
 */

export interface SourcePosition {
  /** 1-based. */
  line: number;
  /** 1-based. */
  col: number;
}

/** Which end of a mapping entry a position refers to. */
export type PositionTarget = 'key' | 'value';

/**
 * Aliases are for small reuse: the document with every alias expanded is bounded in size (scalar
 * characters plus one per node), which stops "billion laughs" documents whatever their alias count.
 */
export const MAX_EXPANDED_SIZE = MAX_CONFIG_BYTES;
/** Deeper flow nesting (`[`, `{`) than any config needs; a bound keeps every recursive walk far from the stack limit. */
export const MAX_NESTING_DEPTH = 64;
/** Block nesting shows as indentation (and `- ` markers): a line indented this far is nested too deeply. */
const MAX_INDENT_COLUMNS = 512;

const BOOL_TAG = 'tag:yaml.org,2002:bool';
const trueScalar: ScalarTag = {
  tag: BOOL_TAG,
  default: true,
  identify: (value) => value === true,
  test: /^(?:[Tt]rue|TRUE|[Yy]es|YES|[Oo]n|ON)$/,
  resolve: () => new Scalar(true),
};
const falseScalar: ScalarTag = {
  tag: BOOL_TAG,
  default: true,
  identify: (value) => value === false,
  test: /^(?:[Ff]alse|FALSE|[Nn]o|NO|[Oo]ff|OFF)$/,
  resolve: () => new Scalar(false),
};
/** PyYAML's exponent form needs a dot and a signed exponent (`1.0e+3`); `1e3` stays a string. */
const exponentFloat = /^[-+]?(?:[0-9][0-9_]*)?\.[0-9_]*[eE][-+][0-9]+$/;

function pyyamlTags(tags: Tags): Tags {
  const out: Tags = [];
  for (const tag of tags) {
    if (typeof tag === 'object' && tag.tag === BOOL_TAG) continue;
    if (typeof tag === 'object' && tag.format === 'EXP' && !('collection' in tag)) {
      out.push({ ...(tag as ScalarTag), test: exponentFloat });
      continue;
    }
    out.push(tag);
  }
  return [trueScalar, falseScalar, ...out];
}

export class ConfigSource {
  private constructor(
    readonly file: string,
    readonly text: string,
    /** The document as plain data. */
    readonly data: Record<string, unknown>,
    private readonly doc: Document.Parsed,
    private readonly lines: LineCounter,
  ) {}

  /** Parses one YAML document whose root is a mapping; throws ConfigError otherwise. */
  static parse(text: string, file: string): ConfigSource {
    if (text.length > MAX_CONFIG_BYTES || Buffer.byteLength(text, 'utf8') > MAX_CONFIG_BYTES) {
      throw tooLarge(file, Buffer.byteLength(text, 'utf8'));
    }
    const lines = new LineCounter();
    const at = (offset: number): SourcePosition => {
      const pos = lines.linePos(offset);
      return { line: pos.line, col: pos.col };
    };
    const nul = text.indexOf('\0');
    if (nul >= 0) {
      const pos = textPosition(text, nul);
      throw new ConfigError(file, pos.line, pos.col, '(file)', 'a NUL byte: a config file is text, and no value may hold NUL');
    }
    const nesting = deepestNesting(text);
    if (nesting.flow > MAX_NESTING_DEPTH || nesting.indent > MAX_INDENT_COLUMNS) {
      const pos = textPosition(text, nesting.offset);
      throw new ConfigError(file, pos.line, pos.col, '(yaml)', `nested too deeply (more than ${MAX_NESTING_DEPTH} brackets or ${MAX_INDENT_COLUMNS} columns of indentation): a config is a few levels of mappings and lists`);
    }
    // The library's own duplicate-key check compares every pair of keys (quadratic in a mapping's
    // size); checkNodes does it with a Set.
    const doc = parseDocument(text, {
      version: '1.1',
      customTags: pyyamlTags,
      lineCounter: lines,
      uniqueKeys: false,
      prettyErrors: false,
    });
    const first = doc.errors[0];
    if (first) {
      const pos = at(first.pos[0]);
      // Only a duplicate key is sure to sit where the parser stopped; other syntax errors may start earlier.
      const path = first.code === 'DUPLICATE_KEY' ? pathAtOffset(doc.contents, first.pos[0]) : [];
      const key = path[path.length - 1];
      const reason =
        first.code === 'DUPLICATE_KEY'
          ? `\`${String(key ?? '')}\` appears twice in this mapping: keep one`
          : first.code === 'MULTIPLE_DOCS'
            ? 'more than one YAML document: a config file holds exactly one'
            : `YAML syntax error: ${first.message.split('\n')[0]?.replace(/ at line \d+, column \d+:?$/, '')}`;
      throw new ConfigError(file, pos.line, pos.col, path.length > 0 ? formatFieldPath(path) : '(yaml)', reason);
    }
    const tagWarning = doc.warnings.find((w) => w.code === 'TAG_RESOLVE_FAILED');
    if (tagWarning) {
      const pos = at(tagWarning.pos[0]);
      const tag = text.slice(tagWarning.pos[0], tagWarning.pos[1]);
      throw new ConfigError(
        file,
        pos.line,
        pos.col,
        formatFieldPath(pathAtOffset(doc.contents, tagWarning.pos[0])) || '(yaml)',
        `unknown YAML tag ${JSON.stringify(tag)}: a config holds plain strings, numbers, booleans, lists and mappings`,
      );
    }
    checkNodes(doc, file, at);
    let data: unknown;
    try {
      // checkNodes bounded the expanded size; the library's alias count is not the measure.
      data = doc.toJS({ maxAliasCount: -1 });
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      throw new ConfigError(file, 1, 1, '(yaml)', `YAML error: ${message.split('\n')[0] ?? ''}`);
    }
    const root = doc.contents;
    const rootPos = root?.range ? at(root.range[0]) : { line: 1, col: 1 };
    if (data === null || data === undefined) {
      throw new ConfigError(file, rootPos.line, rootPos.col, '(document)', 'the file is empty: expected a mapping with `type:`');
    }
    if (typeof data !== 'object' || Array.isArray(data) || data instanceof Date) {
      throw new ConfigError(
        file,
        rootPos.line,
        rootPos.col,
        '(document)',
        `expected a mapping (\`key: value\` lines) at the top level, got ${describeValue(data)}`,
      );
    }
    return new ConfigSource(file, text, data as Record<string, unknown>, doc, lines);
  }

  /**
   * Where the node at `path` is; a path that does not exist in the file (a missing field) falls
   * back to the nearest parent that does.
   */
  position(path: FieldPath, target: PositionTarget = 'value'): SourcePosition {
    const found = this.walk(path);
    const node = target === 'key' && found.depth === path.length ? (found.key ?? found.node) : found.node;
    return this.offsetPosition(node?.range?.[0] ?? 0);
  }

  /** A ConfigError for the node at `path`. `label` replaces the printed path (e.g. `groups[0, 2]`). */
  error(path: FieldPath, reason: string, options: { target?: PositionTarget; label?: string } = {}): ConfigError {
    const pos = this.position(path, options.target);
    return new ConfigError(this.file, pos.line, pos.col, options.label ?? formatFieldPath(path), reason);
  }

  /** A ConfigError for character `offset` of the string at `path` (e.g. a bad reference in a command). */
  errorInString(path: FieldPath, offset: number, reason: string): ConfigError {
    const pos = this.positionInString(path, offset);
    return new ConfigError(this.file, pos.line, pos.col, formatFieldPath(path), reason);
  }

  /**
   * Where character `offset` of the string scalar at `path` is in the file. Exact for plain and
   * quoted one-line strings without escapes and for literal blocks (`|`); the scalar's own start
   * otherwise.
   */
  positionInString(path: FieldPath, offset: number): SourcePosition {
    const found = this.walk(path);
    const node = found.depth === path.length ? found.node : undefined;
    if (!node || !isScalar(node) || typeof node.value !== 'string' || !node.range) return this.position(path);
    const start = node.range[0];
    const value = node.value;
    const fallback = this.offsetPosition(start);
    const exact = (sourceOffset: number): SourcePosition =>
      this.text.startsWith(value.slice(offset, offset + 3), sourceOffset) ? this.offsetPosition(sourceOffset) : fallback;
    switch (node.type) {
      case 'PLAIN':
        return value.includes('\n') ? fallback : exact(start + offset);
      case 'QUOTE_SINGLE':
      case 'QUOTE_DOUBLE': {
        const raw = this.text.slice(start + 1, start + 1 + offset);
        return raw === value.slice(0, offset) ? exact(start + 1 + offset) : fallback;
      }
      case 'BLOCK_LITERAL': {
        // A literal block keeps every line break, so line i of the value is line i after the header.
        const lineIndex = value.slice(0, offset).split('\n').length - 1;
        const column = offset - (value.lastIndexOf('\n', offset - 1) + 1);
        const contentLines = this.text.slice(this.text.indexOf('\n', start) + 1).split('\n');
        const firstContent = contentLines.find((line) => line.trim() !== '') ?? '';
        const indent = /^ */.exec(firstContent)?.[0].length ?? 0;
        const headerLine = this.offsetPosition(start).line;
        const lineStart = this.lines.lineStarts[headerLine + lineIndex];
        return lineStart === undefined ? fallback : exact(lineStart + indent + column);
      }
      default:
        return fallback;
    }
  }

  private offsetPosition(offset: number): SourcePosition {
    const pos = this.lines.linePos(offset);
    return { line: pos.line, col: pos.col };
  }

  /** Follows `path` as far as the document goes. */
  private walk(path: FieldPath): { node: Node | undefined; key: Node | undefined; depth: number } {
    let node = this.resolve(this.doc.contents ?? undefined);
    let key: Node | undefined;
    let depth = 0;
    for (const part of path) {
      if (!node) break;
      let next: Node | undefined;
      let nextKey: Node | undefined;
      if (isMap(node) && typeof part === 'string') {
        const pair = node.items.find(
          (item): item is Pair<ParsedNode, ParsedNode | null> => isPair(item) && isScalar(item.key) && String(item.key.value) === part,
        );
        if (pair) {
          nextKey = pair.key as Node;
          // `key:` with nothing after it: the key is the best place to point at.
          const value = pair.value;
          const empty = !value || (isScalar(value) && value.value === null && value.range[0] === value.range[1]);
          next = empty ? nextKey : this.resolve(value);
        }
      } else if (isSeq(node) && typeof part === 'number') {
        next = this.resolve((node.items[part] as Node | undefined) ?? undefined);
      }
      if (!next) break;
      node = next;
      key = nextKey;
      depth += 1;
    }
    return { node, key, depth };
  }

  private resolve(node: Node | undefined): Node | undefined {
    if (node && isAlias(node)) return (node.resolve(this.doc) as Node | undefined) ?? node;
    return node;
  }
}

/**
 * One pass over the parsed document, aliases followed once each (memoised): duplicate keys in any
 * mapping (a Set per mapping: linear), keys that are not plain values, aliases to no anchor, and
 * the size of the document with every alias expanded.
 */
function checkNodes(doc: Document.Parsed, file: string, at: (offset: number) => SourcePosition): void {
  const expandedSize = new Map<Node, number>();
  const open = new Set<Node>();
  const fail = (node: Node | null | undefined, path: FieldPath, reason: string): never => {
    const pos = at(node?.range?.[0] ?? 0);
    throw new ConfigError(file, pos.line, pos.col, path.length > 0 ? formatFieldPath(path) : '(yaml)', reason);
  };
  const visit = (node: Node | null | undefined, path: FieldPath): number => {
    if (!node) return 1;
    const known = expandedSize.get(node);
    if (known !== undefined) return known;
    let size = 1;
    open.add(node);
    if (isAlias(node)) {
      const target = node.resolve(doc) as Node | undefined;
      if (!target) fail(node, path, `alias *${node.source} refers to no anchor: define \`&${node.source}\` before it`);
      if (open.has(target as Node)) fail(node, path, `alias *${node.source} refers to a node that contains it: the value would never end`);
      size = visit(target, path);
    } else if (isScalar(node)) {
      // An escape (`"\0"`, `"\x00"`) can write NUL where the file itself holds none.
      if (typeof node.value === 'string' && node.value.includes('\0')) fail(node, path, 'a NUL character: no value may hold NUL');
      size += typeof node.value === 'string' ? node.value.length : 1;
    } else if (isMap(node)) {
      const seen = new Set<string>();
      for (const item of node.items) {
        const keyNode = item.key as Node | null;
        if (keyNode && !isScalar(keyNode)) {
          fail(keyNode, path, 'a mapping key must be a plain value (a name), not a list, a mapping or an alias');
        }
        const key = isScalar(keyNode) ? String(keyNode.value) : '';
        // YAML 1.1 merge keys (`<<: *base`) may repeat.
        if (key !== '<<') {
          if (seen.has(key)) fail(keyNode, [...path, key], `\`${key}\` appears twice in this mapping: keep one`);
          seen.add(key);
        }
        size += key.length + visit(item.value as Node | null, [...path, key]);
      }
    } else if (isSeq(node)) {
      node.items.forEach((item, index) => {
        size += visit(item as Node | null, [...path, index]);
      });
    }
    if (size > MAX_EXPANDED_SIZE) {
      fail(node, path, `with its aliases expanded the document is larger than ${MAX_EXPANDED_SIZE / (1024 * 1024)} MiB: write the values out, or reuse less`);
    }
    open.delete(node);
    expandedSize.set(node, size);
    return size;
  };
  visit(doc.contents, []);
}

/** Line and column of `offset`, for refusals made before the parser has counted lines. */
function textPosition(text: string, offset: number): SourcePosition {
  let line = 1;
  let lineStart = 0;
  for (let i = text.indexOf('\n'); i >= 0 && i < offset; i = text.indexOf('\n', i + 1)) {
    line += 1;
    lineStart = i + 1;
  }
  return { line, col: offset - lineStart + 1 };
}

/**
 * How deep flow (`[`, `{`) and block (indentation, `- `) nesting go, found on the text before
 * parsing, so a hostile depth never reaches the parser's or a walker's recursion. An upper bound is
 * enough: brackets inside quoted strings or comments count too, which only makes the check stricter
 * on documents far deeper than any config.
 */
function deepestNesting(text: string): { flow: number; indent: number; offset: number } {
  let flow = 0;
  const deepest = { flow: 0, indent: 0, offset: 0 };
  let lineStart = 0;
  for (let i = 0; i < text.length; i += 1) {
    const c = text.charCodeAt(i);
    if (c === 0x5b || c === 0x7b) {
      flow += 1;
      if (flow > deepest.flow) Object.assign(deepest, { flow, offset: i });
    } else if ((c === 0x5d || c === 0x7d) && flow > 0) {
      flow -= 1;
    } else if (c === 0x0a) {
      lineStart = i + 1;
    } else if (i === lineStart && flow === 0) {
      let j = i;
      while (j < text.length && (text.charCodeAt(j) === 0x20 || text.charCodeAt(j) === 0x2d)) j += 1;
      if (j - i > deepest.indent) Object.assign(deepest, { indent: j - i, offset: i });
    }
  }
  return deepest;
}

/** The field path of the deepest node at `offset`, for errors the YAML parser reports by offset. */
function pathAtOffset(node: unknown, offset: number): (string | number)[] {
  const contains = (n: unknown): boolean => {
    const range = (n as Node | null)?.range;
    return !!range && range[0] <= offset && offset < Math.max(range[2], range[0] + 1);
  };
  if (isMap(node)) {
    for (const item of node.items) {
      const key = isScalar(item.key) ? String(item.key.value) : undefined;
      if (key === undefined) continue;
      if (contains(item.key)) return [key];
      if (contains(item.value)) return [key, ...pathAtOffset(item.value, offset)];
    }
  } else if (isSeq(node)) {
    for (const [index, item] of node.items.entries()) {
      if (contains(item)) return [index, ...pathAtOffset(item, offset)];
    }
  }
  return [];
}

/** A short, readable description of a YAML value for messages: `a number (4.5)`, `a list`. */
export function describeValue(value: unknown): string {
  if (value === null || value === undefined) return 'nothing (null)';
  if (Array.isArray(value)) return 'a list';
  if (value instanceof Date) return 'a date';
  switch (typeof value) {
    case 'string':
      return `a string (${JSON.stringify(value.length > 40 ? `${value.slice(0, 37)}...` : value)})`;
    case 'number':
      return `a number (${value})`;
    case 'boolean':
      return `a boolean (${value})`;
    case 'object':
      return 'a mapping';
    default:
      return typeof value;
  }
}
