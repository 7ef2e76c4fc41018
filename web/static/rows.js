// Keyed table rows, updated in place.
//
// A Rows owns the rows of one <tbody>. update(items) gives every item a row
// named by its key: a row that exists is kept and only the cells whose value
// changed are written; a new key gets a new row; a key that is gone loses its
// row. The rows are then put in the order of items with the fewest moves: the
// longest run of rows that are already in order stays put and only the others
// move. A push of 1,000 rooms where a few counts changed so touches a few
// cells and moves a few rows, not the whole table.
//
// A column is {name, value(item), set?(td, value, item), init?(td), cls?}.
// value() must return something comparable with ===, so that an unchanged
// cell is skipped; set() writes it (by default as the cell's text) and init()
// builds the cell's inner elements once.

export class Rows {
  constructor(tbody, { key, columns, rowInit, onChange }) {
    this.tbody = tbody;
    this.key = key;
    this.columns = columns;
    this.rowInit = rowInit; // (tr, key, item) once, for a new row
    this.onChange = onChange; // (row, column, old, value, td) after a changed cell of an existing row
    this.rows = new Map(); // key -> row
    this.order = []; // rows in DOM order
  }

  get size() { return this.order.length; }

  *[Symbol.iterator]() { yield* this.order; }

  update(items) {
    const next = new Map();
    const order = [];
    for (const item of items) {
      const k = this.key(item);
      if (next.has(k)) continue; // keys are unique; never show a row twice
      let row = this.rows.get(k);
      if (row) {
        this.patch(row, item);
      } else {
        row = this.create(k, item);
      }
      row.item = item;
      next.set(k, row);
      order.push(row);
    }
    for (const [k, row] of this.rows) {
      if (!next.has(k)) row.tr.remove();
    }
    this.place(order);
    this.rows = next;
    this.order = order;
  }

  clear() { this.update([]); }

  create(k, item) {
    const tr = document.createElement('tr');
    const row = { key: k, tr, cells: [], values: [], item, index: -1 };
    for (const col of this.columns) {
      const td = document.createElement('td');
      td.dataset.col = col.name;
      if (col.cls) td.className = col.cls;
      if (col.init) col.init(td, item);
      const v = col.value(item);
      (col.set || setText)(td, v, item);
      row.cells.push(td);
      row.values.push(v);
      tr.append(td);
    }
    if (this.rowInit) this.rowInit(tr, k, item);
    return row;
  }

  patch(row, item) {
    this.columns.forEach((col, i) => {
      const v = col.value(item);
      const old = row.values[i];
      if (v === old) return;
      row.values[i] = v;
      (col.set || setText)(row.cells[i], v, item);
      if (this.onChange) this.onChange(row, col, old, v, row.cells[i]);
    });
  }

  // place puts the rows in the DOM in the given order, moving only rows
  // outside the longest increasing run of their previous positions.
  place(order) {
    const prev = order.map((row) => row.index);
    const keep = stableSet(prev);
    let anchor = null;
    for (let i = order.length - 1; i >= 0; i--) {
      const row = order[i];
      if (!keep.has(i) || row.tr.parentNode !== this.tbody) {
        this.tbody.insertBefore(row.tr, anchor);
      }
      anchor = row.tr;
    }
    order.forEach((row, i) => { row.index = i; });
  }
}

function setText(td, v) {
  td.textContent = v == null ? '' : String(v);
}

// stableSet returns the positions i of a longest strictly increasing
// subsequence of seq, ignoring negative entries (rows that are new).
function stableSet(seq) {
  const tails = []; // tails[l]: position in seq of the smallest tail of a run of length l+1
  const parent = new Array(seq.length).fill(-1);
  for (let i = 0; i < seq.length; i++) {
    const v = seq[i];
    if (v < 0) continue;
    let lo = 0;
    let hi = tails.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (seq[tails[mid]] < v) lo = mid + 1; else hi = mid;
    }
    if (lo > 0) parent[i] = tails[lo - 1];
    tails[lo] = i;
  }
  const keep = new Set();
  for (let i = tails.length ? tails[tails.length - 1] : -1; i >= 0; i = parent[i]) keep.add(i);
  return keep;
}
