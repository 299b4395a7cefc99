// The page's DOM helpers: an element by id, an element built from its attributes and children
// (strings become text nodes: nothing here parses HTML), and the status line under the message
// box that every part of the page writes to.

export const $ = (id) => document.getElementById(id);

/** An element with attributes (`null`/`false` leaves one out) and children (strings are text). */
export function el(tag, attrs = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attrs)) {
    if (value === null || value === undefined || value === false) continue;
    if (name === "class") node.className = value;
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  node.append(...children.filter((c) => c !== null && c !== undefined && c !== false));
  return node;
}

/** The status line under the message box says `text` (and no longer looks like a busy wait). */
export function setStatus(text) {
  $("status").textContent = text;
  $("status").classList.remove("busy");
}
