// skiplock dashboard: the action buttons. A button with data-post POSTs
// to that URL with the page's CSRF token, then reloads the page (or goes
// to data-then); errors show in the flash bar. No inline scripts: the
// Content-Security-Policy allows this file only.
'use strict';
(function () {
  var meta = document.querySelector('meta[name="csrf-token"]');
  var token = meta ? meta.content : '';
  var flash = document.getElementById('flash');

  function show(msg) {
    flash.textContent = msg;
    flash.className = 'flash bad';
    flash.hidden = false;
  }

  document.addEventListener('click', function (ev) {
    var btn = ev.target.closest('button[data-post]');
    if (!btn) {
      return;
    }
    ev.preventDefault();
    if (btn.dataset.confirm && !window.confirm(btn.dataset.confirm)) {
      return;
    }
    btn.disabled = true;
    fetch(btn.dataset.post, {
      method: 'POST',
      headers: { 'X-CSRF-Token': token, 'Content-Type': 'application/json' },
      body: '{}',
      credentials: 'same-origin'
    }).then(function (res) {
      return res.json().catch(function () { return {}; }).then(function (body) {
        if (!res.ok) {
          show((body && body.error) || (res.status + ' ' + res.statusText));
          btn.disabled = false;
          return;
        }
        if (btn.dataset.then) {
          window.location.href = btn.dataset.then;
        } else {
          window.location.reload();
        }
      });
    }).catch(function (err) {
      show(String(err));
      btn.disabled = false;
    });
  });
})();
