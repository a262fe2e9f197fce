// jp-store serve: the one script of the pages (no framework, nothing
// inline). It marks the page as scripted, and when a folded blob
// (<details data-blob="/blobs/<id>/preview">) is unfolded for the first
// time, fetches its first part from the server and shows it as text
// (textContent: never parsed as HTML).
"use strict";
document.documentElement.dataset.script = "on";
document.addEventListener("toggle", (event) => {
  const details = event.target;
  if (!(details instanceof HTMLDetailsElement) || !details.open) return;
  const source = details.dataset.blob;
  if (!source || details.dataset.loaded) return;
  details.dataset.loaded = "loading";
  const shown = details.querySelector("pre.lazy");
  if (!shown) return;
  shown.textContent = "loading…";
  fetch(source, { credentials: "same-origin" })
    .then((response) => {
      if (!response.ok) throw new Error(`${response.status} ${response.statusText}`);
      return response.text();
    })
    .then((text) => {
      shown.textContent = text;
      details.dataset.loaded = "yes";
    })
    .catch((error) => {
      shown.textContent = `cannot load the content: ${error.message}`;
      details.dataset.loaded = "failed";
    });
}, true);
