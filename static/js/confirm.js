// A destructive action asks first, in a dialog that says what it would do: the form's
// data-confirm, written by the server with the impact, and the data-impact of each option
// chosen in it. Confirmed, the form is submitted as it would have been (its own handlers
// run); without JavaScript it posts at once.
(function () {
  const dialog = document.createElement("dialog");
  dialog.id = "confirm-dialog";
  dialog.setAttribute("aria-labelledby", "confirm-text");
  dialog.innerHTML = "<form method='dialog'><p id='confirm-text'></p>" +
    "<p class='actions'><button value='yes' class='danger'></button> " +
    "<button value='no' class='quiet' autofocus></button></p></form>";
  document.body.append(dialog);
  const [yes, no] = dialog.querySelectorAll("button");
  no.textContent = gettext("Go back");
  let pending = null;  // the form and the button that submitted it

  document.addEventListener("submit", (event) => {
    const form = event.target;
    if (!form.dataset.confirm) return;
    if (form.dataset.confirmed) {
      delete form.dataset.confirmed;
      return;
    }
    event.preventDefault();
    event.stopImmediatePropagation();
    const chosen = [...form.querySelectorAll("option:checked[data-impact]")];
    dialog.querySelector("p").textContent =
      [form.dataset.confirm, ...chosen.map((option) => option.dataset.impact)].join(" ");
    pending = { form, submitter: event.submitter };
    yes.textContent = form.dataset.confirmYes || event.submitter?.textContent || gettext("Confirm");
    dialog.returnValue = "";  // Escape leaves the last value
    dialog.showModal();
  }, true);

  dialog.addEventListener("close", () => {
    const { form, submitter } = pending || {};
    pending = null;
    if (dialog.returnValue !== "yes" || !form) return;
    form.dataset.confirmed = "1";
    form.requestSubmit(submitter && form.contains(submitter) ? submitter : undefined);
  });
})();
