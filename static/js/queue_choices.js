// Forms whose queue drives the rest: the GPU models offered are the ones the chosen queue can
// take (each with its quota left and the GPUs free now), and so are the other models and the
// families a job may also run on; the region is the queue's. The server drew the first queue's;
// this swaps them when another is chosen.
(function () {
  const choices = JSON.parse(document.getElementById("queue-choices").textContent);
  document.querySelectorAll("form select[name=queue]").forEach((queue) => {
    const model = queue.form.querySelector("select[name=gpu_model]");
    const region = queue.form.querySelector("input[name=region]");
    const also = queue.form.querySelector(".also-choices");
    queue.addEventListener("change", () => {
      const chosen = choices[queue.value];
      if (!chosen) return;
      const keep = model.value;
      const kept = chosen.models.some(([name]) => name === keep);
      model.replaceChildren(...chosen.models.map(([name, label], i) =>
        new Option(label, name, false, kept ? name === keep : i === 0)));
      if (region) region.value = chosen.region;
      if (also) {
        also.replaceChildren(...[...chosen.models, ...chosen.families].map(([name, label]) => {
          const box = document.createElement("label");
          box.className = "check";
          const input = Object.assign(document.createElement("input"),
            { type: "checkbox", name: "also", value: name });
          box.append(input, ` ${label}`);
          return box;
        }));
      }
    });
  });
})();
