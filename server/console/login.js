// Shows the "wrong token" notice after a refused login.
if (new URLSearchParams(location.search).has("wrong")) {
  document.getElementById("wrong").hidden = false;
}
