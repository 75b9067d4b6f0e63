// The submit form: each checkpoint policy's expected ETTR for the GPU count being typed.
(function () {
  const gpus = document.querySelector("input[name=gpus]");
  const box = document.getElementById("advice");
  let timer;

  async function show() {
    const n = parseInt(gpus.value, 10);
    if (!(n > 0)) { box.textContent = ""; return; }
    const response = await fetch(`/api/v1/checkpoint-advice/?gpus=${n}`);
    if (!response.ok) return;
    const advice = await response.json();
    const rows = advice.policies.map((p) => {
      const every = p.interval_s ? `every ${Math.round(p.interval_s / 60)} min` : "";
      return `<tr><td>${p.policy}</td><td>${every}</td><td>${p.expected_ettr.toFixed(3)}</td></tr>`;
    });
    box.innerHTML = `<table><thead><tr><th>Policy</th><th>Interval</th>` +
      `<th>Expected ETTR at ${n} GPUs</th></tr></thead><tbody>${rows.join("")}</tbody></table>` +
      `<small></small>`;
    box.querySelector("small").textContent = `Failure rate: ${advice.source}.`;
  }

  gpus.addEventListener("input", () => { clearTimeout(timer); timer = setTimeout(show, 250); });
  show();
})();
