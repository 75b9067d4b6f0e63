// A table wider than the screen scrolls inside its card (a phone's layout): keyboard users reach
// it with Tab and scroll it with the arrow keys. Checked once drawn, on resize, whenever parts
// of the page are drawn again, and by scripts that draw a table (`wankaScrolling()`).
(function () {
  function mark() {
    document.querySelectorAll("main table").forEach((table) => {
      if (table.scrollWidth > table.clientWidth + 1) table.tabIndex = 0;
      else if (table.tabIndex === 0) table.removeAttribute("tabindex");
    });
  }
  let timer;
  window.addEventListener("resize", () => { clearTimeout(timer); timer = setTimeout(mark, 200); });
  document.addEventListener("wanka:parts", mark);
  window.wankaScrolling = mark;
  mark();
})();
