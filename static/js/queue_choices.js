// Forms whose queue drives the rest: the GPU models offered are the ones the chosen queue can
// take (each with its quota left and the GPUs free now), and the region is the queue's. The
// server drew the first queue's; this swaps them when another is chosen.
(function () {
  const choices = JSON.parse(document.getElementById("queue-choices").textContent);
  document.querySelectorAll("form select[name=queue]").forEach((queue) => {
    const model = queue.form.querySelector("select[name=gpu_model]");
    const region = queue.form.querySelector("input[name=region]");
    queue.addEventListener("change", () => {
      const chosen = choices[queue.value];
      if (!chosen) return;
      const keep = model.value;
      const kept = chosen.models.some(([name]) => name === keep);
      model.replaceChildren(...chosen.models.map(([name, label], i) =>
        new Option(label, name, false, kept ? name === keep : i === 0)));
      if (region) region.value = chosen.region;
    });
  });
})();
