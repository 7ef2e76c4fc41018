// Building the page's elements. Data only ever goes in as text or
// attribute values, never as HTML: a room can be called "<script>".

// el builds an element. props are attributes, but for class, text (set as
// text, never parsed) and data (dataset entries); children are nodes or
// text.
export function el(tag, props = {}, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props)) {
    if (k === 'class') e.className = v;
    else if (k === 'text') e.textContent = v;
    else if (k === 'data') Object.assign(e.dataset, v);
    else e.setAttribute(k, v);
  }
  e.append(...children);
  return e;
}

// setText sets a node's text if it changed.
export function setText(node, text) {
  if (node.textContent !== text) node.textContent = text;
}
